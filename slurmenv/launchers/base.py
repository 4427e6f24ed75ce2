"""What every launcher module shares: the :class:`Task` it reads, the :class:`Topology` base,
and the rules about Slurm variables and credentials that must live in one place.

A launcher module (see ``launchers/__init__.py`` for the registry and ``docs/design.md`` for
the recipe) declares what ``tests/launcher_contract.py`` lists (``NAME``, ``VARIABLES``,
``PREFIXES``, ``TASK_VARIABLES``, ``FALLBACK``, ``WORLD``, ``ENCLOSED_BY``, ``WHY_EMPTY``,
``detect``, ``read``), and
``slurmenv/pipeline.py`` (``derive``) turns the Task ``read`` gives into a Resolution
(address, port, bindings). The helpers below (:func:`read_int`, :func:`optional_int`,
:func:`agree`, :func:`node_sources`, :func:`hashed_id`) hold the rules every launcher's
``read`` follows, once.
"""

from __future__ import annotations

from ..errors import SlurmEnvError, check_host, parse_int, require
from ..lean import TYPE_CHECKING, NamedTuple  # not typing's: on export's path

#: Slurm's special step ids (``slurm/slurm.h``, the same in 22.05 and 26.05): not a step of
#: srun tasks. 22.05 prints them unsigned (``4294967290``); 26.05 prints them signed (``-6``),
#: and sets ``SLURM_STEP_ID=-5`` in the batch script, where 22.05 left it unset.
PENDING_STEP = 0xFFFFFFFD  # SLURM_PENDING_STEP
EXTERN_STEP = 0xFFFFFFFC  # SLURM_EXTERN_CONT: the extern step
BATCH_STEP = 0xFFFFFFFB  # SLURM_BATCH_SCRIPT: the batch script
INTERACTIVE_STEP = 0xFFFFFFFA  # SLURM_INTERACTIVE_STEP: salloc with use_interactive_step


def printed(step: int) -> tuple[str, str]:
    """How Slurm prints a special step id: unsigned (22.05) and signed (26.05)."""
    return str(step), str(step - (1 << 32))


#: Every printed form of the step ids that are not a step of srun tasks
#: (bin/slurmenv-site-prolog lists the same; a test checks it).
SPECIAL_STEPS = tuple(text for step in (INTERACTIVE_STEP, BATCH_STEP, EXTERN_STEP, PENDING_STEP)
                      for text in printed(step))
#: The step ids of no step of srun tasks but the interactive step, in both printed forms.
OUTSIDE_STEPS = frozenset(printed(BATCH_STEP) + printed(EXTERN_STEP) + printed(PENDING_STEP))

#: MPI rank/size variables that, when present with Slurm's, must agree with them for the
#: SLURM_* to be this task's own (srun --mpi=pmi2|cray_shasta tasks carry both).
_MPI_RANKS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "PALS_RANKID",
              "PMIX_RANK")
_MPI_SIZES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


def job_id(environ: Mapping[str, str]) -> str | None:
    """The Slurm job ID, if this process belongs to a Slurm job."""
    return environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or None


def step_id(environ: Mapping[str, str]) -> str | None:
    """The Slurm step ID, if this process carries one."""
    return environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID") or None


def in_job_outside_steps(environ: Mapping[str, str]) -> bool:
    """Inside a Slurm job but in no step of srun tasks: the batch script, an salloc shell, the
    extern step (the interactive step is a step of its own; see :func:`interactive_step`)."""
    if job_id(environ) is None:
        return False
    step = step_id(environ)
    return step is None or step in OUTSIDE_STEPS


def interactive_step(environ: Mapping[str, str]) -> bool:
    """salloc's interactive step (``LaunchParameters=use_interactive_step``): one process."""
    step = step_id(environ)
    return job_id(environ) is not None and step is not None and step in printed(INTERACTIVE_STEP)


def slurm_step_is_own(environ: Mapping[str, str]) -> bool:
    """Whether the ``SLURM_*`` task variables here describe this very process: a task that
    ``srun`` started (not the batch script, and not an MPI rank that inherited the variables
    of a daemon step or of the batch script).

    The rule, once for every launcher: a step ID of a real step is set, and any MPI rank and
    size variables present agree with ``SLURM_PROCID`` and ``SLURM_STEP_NUM_TASKS`` (as they
    do for ``srun --mpi=pmi2|cray_shasta`` tasks). Presence and equality only: this runs for
    every task of every step.
    """
    if job_id(environ) is None:
        return False
    step = step_id(environ)
    if step is None or step in SPECIAL_STEPS:
        return False
    if "MPI_LOCALRANKID" in environ:
        # Hydra's own variable (srun --mpi=pmi2 never sets it): a Hydra rank under its proxy
        # step, whose PMI_RANK/PMI_SIZE equal the proxy's SLURM_PROCID/SLURM_STEP_NUM_TASKS
        # with one rank per node (mpiexec -ppn 1, observed) although the SLURM_* are not its own.
        return False
    return foreign_mpi(environ) is None


def foreign_mpi(environ: Mapping[str, str]) -> tuple[str, str, str] | None:
    """The first MPI rank/size variable that disagrees with the Slurm task variables, as
    (name, value, the Slurm variable it disagrees with), or None."""
    for names, slurm_name in ((_MPI_RANKS, "SLURM_PROCID"), (_MPI_SIZES, "SLURM_STEP_NUM_TASKS")):
        mine = environ.get(slurm_name)
        for name in names:
            value = environ.get(name)
            if value is not None and value != mine:
                return name, value, f"{slurm_name}={mine}"
    return None


def bad_hosts(hosts: Sequence[str]) -> Sequence[str]:
    """The names of ``hosts`` that :func:`errors.host_problem` refuses (empty when none): one
    pass over all of them joined for the common case (no per-name call for a 100,000-node
    list), each name looked at only when the joined text shows a problem."""
    from ..errors import MAX_HOST, MAX_LABEL, host_problem

    joined = ".".join(hosts)
    if not hosts or (
        joined.isascii() and joined.replace(".", "a").replace("-", "a").replace("_", "a").isalnum()
        and ".." not in joined and ".-" not in joined and "-." not in joined
        and joined[0] != "-" and joined[-1] != "-"
        and max(map(len, joined.split("."))) <= MAX_LABEL
        and max(map(len, hosts)) <= MAX_HOST
    ):
        return ()
    return [host for host in hosts if host_problem(host) is not None]


# -- reading a launcher's variables ---------------------------------------------------------
def read_int(environ: Mapping[str, str], name: str, fix: str, *, minimum: int = 0) -> int:
    """The whole number in variable ``name``, which the launcher always sets: refused, naming
    the variable, its value and ``fix``, when unset or empty, not ASCII digits (at most
    ``errors.MAX_DIGITS``), or below ``minimum``."""
    return parse_int(name, require(environ, name, fix), minimum=minimum, fix=fix)


def optional_int(
    environ: Mapping[str, str], name: str, fix: str, *, minimum: int = 0
) -> int | None:
    """The whole number in variable ``name``, or None when it is unset or empty; a value that
    is set is read as strictly as by :func:`read_int`."""
    text = environ.get(name)
    return None if text is None or text == "" else parse_int(name, text, minimum=minimum, fix=fix)


def agree(
    name: str, value: int | None, other: str, expected: int | None, fix: str, why: str = ""
) -> None:
    """Refuse ``name``=``value`` unless it equals ``expected``, what ``other`` tells: a
    variable (``FLUX_TASK_RANK``: the message says ``FLUX_TASK_RANK=3``) or a phrase (``the
    node index of rank 3 in the apinfo file``: the message says ``... is 1``). Nothing is
    compared when either is None (a variable that is not set). The refusal names ``name`` and
    its value (the variable at fault), ``other`` and its value, ``why`` (if given) and ``fix``.
    """
    if value is None or expected is None or value == expected:
        return
    told = f"{other}={expected}" if other.isidentifier() else f"{other} is {expected}"
    raise SlurmEnvError(
        f"{name}={value} but {told}" + (f" ({why})" if why else ""),
        variable=name, value=str(value), fix=fix,
    )


def below(name: str, value: int, limit_name: str, limit: int, fix: str) -> None:
    """Refuse ``name``=``value`` (an index) unless it is below ``limit_name``=``limit``."""
    if value >= limit:
        raise SlurmEnvError(f"{name}={value} is not below {limit_name}={limit}",
                            variable=name, value=str(value), fix=fix)


def node_sources(node_rank: str, nnodes: str) -> dict[str, str]:
    """The ``sources`` of ``NODE_RANK``, ``GROUP_RANK`` and ``NNODES``: ``GROUP_RANK`` is
    torchrun's name for ``NODE_RANK`` (the same value, ``render.RANK_FIELDS``), so the same
    sentence."""
    return {"NODE_RANK": node_rank, "GROUP_RANK": node_rank, "NNODES": nnodes}


def hashed_id(name: str, text: str) -> tuple[int, str]:
    """A job or launch ID that is not a small sequential number (a Flux job ID, a PALS APID, a
    PMIx namespace) as a number for the port formula, ``ports.stable_hash`` of ``text`` (the
    same in every rank), and the sentence naming it (``PALS_APID=8f3c1e hashed``)."""
    from ..ports import stable_hash  # launchers with text IDs only

    return stable_hash(text), f"{name}={text} hashed"


class Topology:
    """The parts of a resolution that need the whole world's layout, computed on first use.

    Launchers subclass it; the base class knows nothing beyond this task, and each method
    raises SlurmEnvError naming what is missing and the way out. ``pipeline.derive`` calls
    :meth:`use` before the Resolution is built, so ``tf_workers`` knows the ports and the
    address of each host.
    """

    #: The launcher tells which node every rank is on (``show --all-ranks`` can draw the step).
    layout_known = False
    #: The per-node task counts as the launcher wrote them (``2(x2)``), or None.
    tasks_per_node: str | None = None

    def use(
        self, plan: PortPlan, address: AddressOf | None, ephemeral: tuple[int, int] | None
    ) -> None:
        """Remember the ports, the host -> address function (None: names as they are) and
        the ephemeral range."""
        self.port_plan = plan
        self.address = address
        self.__dict__.pop("_addressed", None)  # addresses made with another function
        self.ephemeral = ephemeral

    def addresses(self, hosts: Sequence[str]) -> list[str]:
        """The address of each host (the address template applied, if any), all checked as
        host names at once (:func:`bad_hosts`): a refusal names the template when there is
        one, else the node name."""
        done = self.__dict__.get("_addressed")
        if done is not None and done[0] is hosts:  # TF_CONFIG's bound, then its workers
            return done[1]  # type: ignore[no-any-return]
        address = self.address
        made = list(hosts) if address is None else [address(host, False) for host in hosts]
        for bad in bad_hosts(made):
            if address is not None:
                address(hosts[made.index(bad)])  # raises, naming the template
            check_host("TF_CONFIG", bad, "fix the node names the launcher gives, or give an "
                       "address template (--addr-template) that makes host names of them",
                       what="the node name")
        self._addressed = (hosts, made)
        return made

    def tf_bound(self, world_size: int) -> int:
        """The fewest bytes TF_CONFIG's worker list can take, known before it is built: every
        rank's entry holds an address at least as long as the shortest (checked) address of
        the nodes, a port of 4 digits or more, two quotes, a colon and a comma. 0 when the
        launcher tells no node list (``tf_workers`` refuses then)."""
        try:
            hosts = self.hosts()
        except SlurmEnvError:
            return 0
        if not hosts:
            return 0
        shortest = min(map(len, self.addresses(hosts)))
        return world_size * (shortest + len(':1024"",'))

    def largest_local(self) -> int | None:
        """The most tasks on one node (how many TensorFlow ports a node needs), if known."""
        return None

    def layout_name(self) -> str | None:
        """``block``, ``cyclic (Slurm's default)``, ... or None when the launcher has none."""
        return None

    def hosts(self) -> Sequence[str]:
        """Node names in node-index order."""
        raise SlurmEnvError(
            "this launcher does not tell the node list", variable="TF_CONFIG",
            fix="export without TF_CONFIG (slurmenv export --for torch)",
        )

    def node_of(self) -> Sequence[int]:
        """Node index of every rank."""
        raise SlurmEnvError(
            "this launcher does not tell where each rank runs", variable="TF_CONFIG",
            fix="export without TF_CONFIG (slurmenv export --for torch)",
        )

    def local_of(self) -> Sequence[int]:
        """Local rank of every rank."""
        return self.node_of()

    def tf_workers(self) -> list[str]:
        """``host:port`` of every rank, in rank order (TensorFlow's worker list)."""
        raise SlurmEnvError(
            "TF_CONFIG cannot be built: this launcher does not tell where each rank runs",
            variable="TF_CONFIG",
            fix="export only the torch variables (slurmenv export --for torch), or launch one "
            "task per process with srun so slurmenv sees the whole step",
        )

    def tf_source(self) -> str | None:
        """Where TF_CONFIG comes from (for ``sources``), None when it cannot be built."""
        return None


if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ..ports import Ports as PortPlan

    #: host -> address through the address template: ``address(host)`` checks the result
    #: (SlurmEnvError naming the template), ``address(host, False)`` only formats it.
    AddressOf = Callable[..., str]


class Task(NamedTuple):
    """One task as its launcher tells it: every field read from the environment or derived
    from what was read, never guessed (see ``docs/design.md``).

    ``sources`` maps RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK,
    NNODES (and any ``fixed`` name) to the sentence naming the input variables.
    ``master_host`` is rank 0's node name before the address template (None: unknown, and
    ``master_source`` says why). ``port_seed`` is (job id, launch id) for the port formula;
    None where no such id exists. ``fixed`` holds values the launcher itself set, which win as
    they are (torchrun's MASTER_ADDR and MASTER_PORT). ``own_bindings`` is False where the
    Slurm CPU/GPU variables describe another process (an MPI daemon step): derive then leaves
    GPU lists and thread counts alone, with a note.
    """

    launcher: str
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    nnodes: int
    hostname: str
    sources: dict[str, str]
    master_host: str | None
    master_source: str
    port_seed: tuple[int, int] | None
    port_seed_source: str
    reserved_ports: tuple[str, str] | None
    topology: Topology
    job_id: str | None = None
    step_id: str | None = None
    own_bindings: bool = True
    fixed: Mapping[str, str] = {}
    notes: tuple[str, ...] = ()
    #: One sentence: what started this task (doctor's "step" check, show).
    origin: str = ""
    #: When set, this task is not what a training run usually wants (a single process): the
    #: fix to show with ``origin`` as a warning.
    origin_fix: str | None = None
    #: A short label for titles (``job 12, step 0``); defaults to ``launcher``.
    label: str = ""
    #: This process is a worker another launcher already numbered (torchrun's workers, RANK
    #: set by hand): it must not start a launcher of its own (``slurmenv torchrun``).
    in_worker: bool = False
    #: A single process on this machine: with no port given, a port free on 127.0.0.1 now.
    free_port: bool = False
    #: ``(variable, value)`` naming this launch, for a launch that is not a Slurm step and
    #: whose launch ID is not a small sequential number (Open MPI's mpirun: its job id; a PBS
    #: PALS mpiexec: PALS_APID; a Flux job: FLUX_JOB_ID). Set,
    #: the port formula is ``ports.launch_ports`` (the range outside the job's block, by
    #: ``port_seed``'s launch ID) and rank 0 refuses a MASTER_PORT that another live launch's
    #: rank 0 on its node also resolves to (``rivals.py``).
    launch_key: tuple[str, str] | None = None
    #: Outputs no variable here tells (``NODE_RANK``, ``GROUP_RANK``, ``NNODES`` of an Open MPI
    #: 5 rank over several nodes): never exported, ``sources`` says why, and reading them from
    #: the Resolution raises SlurmEnvError (torchrun, Lightning need them and refuse).
    unknown: tuple[str, ...] = ()


# -- credentials -----------------------------------------------------------------------------
REDACTED = "REDACTED"
#: Pieces of a variable name that mark its value as a credential (compared upper-case).
CREDENTIAL_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CRED", "JWT", "AUTH",
                    "PRECONDITION_TRANSPORTS", "COOKIE")
#: Proxy variables whose values are URLs that may carry ``user:password@``.
URL_PROXIES = ("grpc_proxy", "https_proxy", "http_proxy", "HTTPS_PROXY", "HTTP_PROXY")


def is_credential(name: str) -> bool:
    """Whether a variable's name says its value is a secret (``OMPI_MCA_orte_precondition_
    transports``, ``*_TOKEN``, ``*_KEY``, ...)."""
    upper = name.upper()
    return any(word in upper for word in CREDENTIAL_WORDS)


def redact_proxy(value: str) -> str:
    """``http://user:pass@proxy:3128`` -> ``http://REDACTED@proxy:3128``: keep the host only."""
    import re  # dump only, never on export's path

    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*://)?(.*)$", value, re.DOTALL)
    assert match is not None  # the pattern matches every string
    scheme, rest = match.group(1) or "", match.group(2)
    if "@" not in rest:
        return value
    return f"{scheme}{REDACTED}@{rest[rest.rfind('@') + 1:]}"


def redact_url(value: str) -> str:
    """A URL's credentials removed: ``user:password@`` (:func:`redact_proxy`) and the value of
    every query parameter whose name :func:`is_credential` says is a secret
    (``?access_token=...``, ``&api_key=...``)."""
    import re  # dump only, never on export's path

    kept = redact_proxy(value)
    return re.sub(
        r"([?&;])([^=&;#]*)=([^&;#]*)",
        lambda m: f"{m.group(1)}{m.group(2)}={REDACTED}" if is_credential(m.group(2))
        else m.group(0),
        kept,
    )


def redact(name: str, value: str) -> str:
    """The value a dump may keep for ``name``: by its name (a credential's, :func:`is_credential`)
    and by its shape, as for the lines of a file: a value holding a token of a well-known form
    (:data:`TOKEN_PREFIXES`) is replaced, a URL's credentials are removed (:func:`redact_url`;
    every proxy variable's value is read as a URL)."""
    if is_credential(name) or holds_token(value):
        return REDACTED
    if name in URL_PROXIES or "://" in value or "?" in value:
        return redact_url(value)
    return value


def holds_token(text: str) -> bool:
    """Whether ``text`` holds a token of a well-known form (:data:`TOKEN_PREFIXES`) as one of
    its words (split at blanks and at ``=``, ``:``, ``,``, ``;``, ``@``, ``/``, quotes)."""
    import re  # dump only

    return any(word.startswith(TOKEN_PREFIXES) for word in re.split(r"[\s=:,;@/'\"]+", text))


#: How well-known tokens begin (GitHub, GitLab, Slack, AWS keys, JSON web tokens, PEM keys): a
#: line of a file starting so is a secret whatever its name.
TOKEN_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xoxb-",
                  "xoxp-", "xoxa-", "xoxs-", "AKIA", "ASIA", "eyJ", "-----BEGIN")


def looks_like_credential(line: str) -> bool:
    """Whether a line of a file looks like it holds a secret: ``NAME=value`` or ``NAME: value``
    whose NAME :func:`is_credential` says is one (the rule of the variables, applied to the
    file), or a token of a well-known form (:data:`TOKEN_PREFIXES`). ``slurmenv dump`` never
    stores a file holding such a line."""
    text = line.strip().removeprefix("export ").strip()
    for sep in ("=", ":"):
        name, found, _ = text.partition(sep)
        if found and is_credential(name.strip().strip("'\"")):
            return True
    return holds_token(text)
