"""User choices that change a resolution: the options table.

Each option is one row of :class:`Options`' body: its field, type and default as a Python
class attribute, and through :func:`option` its ``SLURMENV_*`` variable, command-line flag,
kind and help. Everything else is made from that table: :class:`Options`,
:func:`from_environ`, every command's argparse options (:func:`add_arguments`), the
argparse-free parser of ``export``/``exec``/``torchrun`` (:func:`parse_leading`), what ``dump``
records (:func:`given_in`), doctor's option names (:func:`names`), ``slurmenv torchrun``'s
options (``torchrun=True``) and docs/options.md (tests/doc_tables.py). Adding an option is one
row; an option of a new kind is one :class:`Kind` and its row. A variable carries a choice made
once in the batch script to every task; a keyword or flag overrides it.
"""

from __future__ import annotations

from .errors import SlurmEnvError, host_problem
from .launchers import REGISTRY  # names only: no launcher module is imported
from .lean import TYPE_CHECKING, NamedTuple  # not typing's: see lean.py
from .ports import DEFAULT_RANGE, PORT_FIX, RANGE_FIX, parse_port, parse_range
from .render import OUTPUTS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any, TypeAlias

    #: A command-line option: ``parser.add_argument(flag, **keywords)``.
    Arg: TypeAlias = tuple[str, dict[str, Any]]

TRUE = ("1", "true", "yes", "on")
FALSE = ("", "0", "false", "no", "off")


# -- kinds of option -----------------------------------------------------------------------
class Kind:
    """A kind of option: how a text (a variable's value or a flag's argument) becomes its
    value, the fix when it cannot, its types, and samples every row of the kind is tested with.

    ``read(text, variable)`` returns the value or raises ValueError saying what is wrong
    (:meth:`parse` adds the variable or flag, the text and ``fix``), or a SlurmEnvError of its
    own whose fix is ``fix``. ``type`` is the value's annotation: an Options field of this
    kind is annotated ``type``, or ``type | None`` when its default is None; ``keyword`` is the
    annotation of its keyword of :func:`slurmenv.resolve` (default ``type | None``).
    ``valid`` are ``(text, value)`` pairs, two at least with different values, and
    ``invalid`` texts it refuses: tests/test_options.py runs every row through them. Adding a
    kind is one ``Kind(...)`` here; its rows then use it like any other.

    A plain class, not a named tuple, as :class:`Option` (this module is on export's path).
    """

    __slots__ = ("fix", "invalid", "keyword", "name", "read", "type", "valid")

    def __init__(self, name: str, read: Callable[[str, str], object], type: str, fix: str, *,
                 valid: Sequence[tuple[str, object]], invalid: Sequence[str],
                 keyword: str | None = None) -> None:
        self.name, self.read, self.type, self.fix = name, read, type, fix
        self.valid, self.invalid = tuple(valid), tuple(invalid)
        self.keyword = keyword or f"{type} | None"
        _KINDS.append(self)

    def parse(self, text: str, variable: str) -> Any:
        """The value ``text`` means; SlurmEnvError naming ``variable`` and ``text`` if none."""
        try:
            return self.read(text, variable)
        except ValueError as exc:
            raise SlurmEnvError(str(exc), variable=variable, value=text, fix=self.fix) from None

    def __repr__(self) -> str:
        return f"<kind {self.name}>"


_KINDS: list[Kind] = []


def _flag(text: str, variable: str) -> bool:
    """A yes/no value: 1, true, yes, on or 0, false, no, off (any case), or empty (no)."""
    value = text.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ValueError(f"{variable} must be a yes/no flag")


def _template(template: str, variable: str) -> str:
    """A host template must contain ``{host}`` and nothing else in braces: no format spec
    (``{host:>9}``), no conversion (``{host!r}``), no other field; and no control character
    (a line break, a tab, NUL, an escape), which no address holds."""
    if not template.isprintable():
        raise ValueError("address template holds a control character (a line break, a tab, "
                         "NUL or an escape), which no address holds")
    # Parse rather than format: "{host.upper}" or "{host:>999999999}" would run code, exhaust
    # memory or put blanks in an address when formatted.
    from string import Formatter  # only when a template is given (not on export's path)

    try:
        fields = [(field, spec, conv) for _, field, spec, conv in Formatter().parse(template)
                  if field is not None or spec or conv]
    except ValueError:
        fields = None
    ok = bool(fields) and all(part == ("host", "", None) for part in fields or ())
    if not ok:
        raise ValueError("address template must contain {host} and no other {field}")
    # With the shortest node name (one letter), the template must already give a host name:
    # what it adds is checked here, once, before any address is built (a 120 KB template over
    # 1,000 nodes is refused at once, not after building 120 MB of addresses).
    problem = host_problem(template.replace("{host}", "h"))
    if problem is not None:
        raise ValueError(f"address template does not make host names: with a node 'h' "
                         f"{problem}")
    return template


def _address(address: str, variable: str) -> str:
    """A host name or IP address (:func:`errors.host_problem`), as it is: nothing stripped."""
    problem = host_problem(address)
    if problem is not None:
        raise ValueError(f"not a host name or IP address: {problem}")
    return address


def _launcher(name: str, variable: str) -> str:
    """The name of a launcher of the registry (``launchers.REGISTRY``)."""
    from . import launchers  # the registry as it is now (tests add launchers to it)

    text = name.strip()
    if text not in launchers.REGISTRY:
        raise ValueError("not the name of a launcher of slurmenv's registry")
    return text


PORT = Kind(
    "port", parse_port, "int", PORT_FIX,  # a TCP port 1024-65535
    valid=[("12345", 12345), ("23456", 23456)],
    invalid=["80", "http", "70000", " 23456", "023456", "23456\n", "+23456"])
RANGE = Kind(
    "range", parse_range, "tuple[int, int]", RANGE_FIX,  # LO-HI
    keyword="tuple[int, int] | str | None",
    valid=[("20000-30000", (20000, 30000)), ("11000-31000", (11000, 31000))],
    invalid=["1-2", "20000", "30000-20000"])
TEMPLATE = Kind(
    "template", _template, "str",  # a host name template with {host}
    "write it like '{host}-ib' or '{host}i.fabric'",
    valid=[("{host}-ib", "{host}-ib"), ("{host}.ib", "{host}.ib")],
    invalid=["{host.upper}", "node-ib", "{host}{host:x}", "{other}", "{host}\n", "{host}\x00",
             "{host} x", "{host};id", "{host}..ib", "{host}." + "x" * 64, "{host}" + "x" * 300])
ADDRESS = Kind(
    "address", _address, "str",  # a host name or IP address
    "give the name or IP address of rank 0's node, e.g. 'node017' or '10.1.2.17'",
    valid=[("10.1.2.17", "10.1.2.17"), ("n7", "n7"), ("fd00::7", "fd00::7")],
    invalid=["two words", " ", " n7 ", "a;b", "$HOME", "*", "a..b", "x" * 64])
def _jobs(text: str, variable: str) -> str:
    """TensorFlow job roles, ``chief=1,ps=2,worker=4`` (read by slurmenv.tfconfig, imported
    only when the option is given)."""
    from .tfconfig import canonical_jobs

    return canonical_jobs(text, variable)


JOBS = Kind(
    "jobs", _jobs, "str",  # TensorFlow job roles: JOB=COUNT,...
    "write it like chief=1,ps=2,worker=4: job names chief, evaluator, ps, worker, each once "
    "with a count of 1 or more; at most one chief and one evaluator; ps needs a chief and "
    "workers (ParameterServerStrategy)",
    valid=[("chief=1,ps=2,worker=4", "chief=1,ps=2,worker=4"),
           ("worker=3, chief=1", "chief=1,worker=3")],
    invalid=["boss=1", "worker=0", "chief=2,worker=1", "ps=1,worker=2", "worker", "worker=1,"])
FLAG = Kind(  # --NAME turns it on, --no-NAME (if it has one) off
    "flag", _flag, "bool", "use 1 or 0",
    valid=[("yes", True), ("no", False), ("ON", True), ("0", False)], invalid=["maybe", "2"])
LAUNCHER = Kind(
    "launcher", _launcher, "str",  # a name of launchers.REGISTRY
    f"use one of {', '.join(REGISTRY)} (docs/launchers.md), or unset it to let slurmenv detect "
    "the launcher",
    valid=[("slurm", "slurm"), (" openmpi ", "openmpi")], invalid=["nosuch", "Slurm", "base"])
parse_flag = FLAG.parse
check_template = TEMPLATE.parse
check_address = ADDRESS.parse


class Option:
    """One row of the options table (see :func:`option`).

    A plain class, not a named tuple: every ``slurmenv export`` imports this module, and a
    named tuple class costs 0.1 ms to create.
    """

    __slots__ = ("default", "field", "flag", "help", "kind", "metavar", "negative", "torchrun",
                 "variable")

    def __init__(self, variable: str, flag: str, kind: Kind, default: object, help: str,
                 metavar: str | None, negative: str | None, torchrun: bool) -> None:
        # field: the name of its Options field, set once the class exists; negative: the help
        # of --no-NAME (flags only; None: no such flag); torchrun: `slurmenv torchrun` takes it
        self.field, self.variable, self.flag, self.kind, self.default, self.help = (
            "", variable, flag, kind, default, help)
        self.metavar, self.negative, self.torchrun = metavar, negative, torchrun

    def __repr__(self) -> str:
        return f"<option {self.field} {self.flag} {self.variable}>"


_ROWS: list[Option] = []


def negative_flag(row: Option) -> str:
    """``--no-NAME`` of a flag row."""
    return "--no-" + row.flag[2:]


def option(variable: str, flag: str, kind: Kind, default: object, help: str, *,
           metavar: str | None = None, negative: str | None = None, torchrun: bool = False) -> Any:
    """A row of the options table, written as the default of an :class:`Options` field.

    Returns ``default`` (so the field's default is the option's); the row is recorded in
    field order and named after its field when the class is complete (see ``TABLE``).
    """
    _ROWS.append(Option(variable, flag, kind, default, help, metavar, negative, torchrun))
    return default


class Options(NamedTuple):
    """Resolution options (all optional); each field is one row of the options table:
    ``name: type = option(variable, flag, kind, default, help, ...)``."""

    port: int | None = option(
        "SLURMENV_PORT", "--port", PORT, None, "force MASTER_PORT (an inherited MASTER_PORT "
        "is also taken as given)", metavar="PORT", torchrun=True)
    port_range: tuple[int, int] = option(
        "SLURMENV_PORT_RANGE", "--port-range", RANGE, DEFAULT_RANGE,
        "range for the job/step port formula", metavar="LO-HI", torchrun=True)
    addr_template: str | None = option(
        "SLURMENV_ADDR_TEMPLATE", "--addr-template", TEMPLATE, None,
        "address names on a fast network, e.g. '{host}-ib'; for MASTER_ADDR and the TF_CONFIG "
        "workers", metavar="TEMPLATE", torchrun=True)
    resolve_addr: bool = option(
        "SLURMENV_RESOLVE_ADDR", "--resolve-addr", FLAG, False,
        "turn MASTER_ADDR into an IPv4 address (one DNS lookup per task: the only option that "
        "touches DNS)",
        torchrun=True)
    tf_chief: bool = option(
        "SLURMENV_TF_CHIEF", "--tf-chief", FLAG, False,
        "make rank 0 TensorFlow's chief, the others worker 0...n-2")
    bind_gpus: bool = option(
        "SLURMENV_BIND_GPUS", "--bind-gpus", FLAG, False,
        "give each task of a node its share of the GPUs the node's tasks share, e.g. "
        "CUDA_VISIBLE_DEVICES=4,5,6,7 and 2 tasks: 4,5 and 6,7 (see slurmenv.gpus)",
        negative="leave GPU lists alone")
    threads: bool = option(
        "SLURMENV_THREADS", "--threads", FLAG, True,
        "set OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS when unset, from "
        "SLURM_CPUS_PER_TASK or the task's CPU affinity (see slurmenv.threads)",
        negative="do not set thread counts")
    # New fields go last: Options is a tuple, and resolve()'s keywords follow this order.
    master_addr: str | None = option(
        "SLURMENV_MASTER_ADDR", "--master-addr", ADDRESS, None,
        "address of rank 0's node, for launchers that cannot tell it (MPI with custom "
        "mappings); wins over the launcher's host", metavar="ADDR", torchrun=True)
    tf_jobs: str | None = option(
        "SLURMENV_TF_JOBS", "--tf-jobs", JOBS, None,
        "TensorFlow job roles for TF_CONFIG, e.g. chief=1,ps=2,worker=4 (ParameterServerStrategy): "
        "ranks go to the jobs in slices in the order chief, evaluator, ps, worker, as "
        "TensorFlow's SlurmClusterResolver does; the evaluator stays out of the cluster",
        metavar="JOB=N,...")
    launcher: str | None = option(
        "SLURMENV_LAUNCHER", "--launcher", LAUNCHER, None,
        "read the task with this launcher instead of detecting it (a name of the registry's, "
        "docs/launchers.md), among readings that agree: refused when that launcher does not "
        "detect the task or when another source of the world contradicts it",
        metavar="NAME")
    pmi: bool = option(
        "SLURMENV_PMI", "--pmi", FLAG, False,
        "ask the step itself where each rank runs, through Slurm's PMI (srun --mpi=pmi2): every "
        "task must run slurmenv, once, and no MPI library can initialise in the task after it "
        "(docs/topology.md)",
        negative="derive the layout from the variables and files only")


if len(_ROWS) != len(Options._fields):  # pragma: no cover - a field without option()
    raise TypeError("every field of Options must be written name: type = option(...)")
for _name, _row in zip(Options._fields, _ROWS):
    _row.field = _name
#: The options table, in field order.
TABLE: tuple[Option, ...] = tuple(_ROWS)
#: Every kind of option (each ``Kind(...)`` above).
KINDS: tuple[Kind, ...] = tuple(_KINDS)
#: How the text of each kind of option is read (``KINDS``' ``parse``, by kind).
PARSERS: dict[Kind, Callable[[str, str], Any]] = {kind: kind.parse for kind in KINDS}


# -- values --------------------------------------------------------------------------------
def given_as(field: str, environ: Mapping[str, str] | None) -> str:
    """How option ``field`` was given, for a refusal to name: its variable when set, else its
    flag (the command line or the keyword)."""
    row = next(row for row in TABLE if row.field == field)
    return row.variable if (environ or {}).get(row.variable) else row.flag


def from_environ(environ: Mapping[str, str], **given: object) -> Options:
    """Options from ``SLURMENV_*`` variables, overridden by the keyword arguments not None.

    A keyword's text (from the command line) is read as its variable's would be, its flag
    named in errors.
    """
    unknown = set(given) - set(Options._fields)
    if unknown:
        raise TypeError(f"unknown option {min(unknown)!r}")
    values: dict[str, Any] = {}
    for row in TABLE:
        value = given.get(row.field)
        if value is not None:
            if isinstance(value, str):
                value = row.kind.parse(value, row.flag)
            values[row.field] = bool(value) if row.kind == FLAG else value
        else:  # unset or empty: the default (a flag's blank value too)
            text = environ.get(row.variable, "")
            if text.strip() if row.kind == FLAG else text:
                values[row.field] = row.kind.parse(text, row.variable)
    return Options(**values)


def default_text(row: Option) -> str:
    """The default as a user writes it (in the flags' help and docs/options.md)."""
    if row.kind == FLAG:
        return "on" if row.default else "off"
    if row.default is None:
        return "unset"
    if isinstance(row.default, tuple):  # a RANGE: (lo, hi)
        return "-".join(str(end) for end in row.default)
    return str(row.default)


# -- command lines -------------------------------------------------------------------------
def _described(row: Option) -> tuple[str, str | None]:
    """Help of ``row``'s flag and of its ``--no-`` flag, naming the variable."""
    if row.kind != FLAG:
        shown = default_text(row)
        default = f", default {shown}" if shown != "unset" else ""
        return f"{row.help} ({row.variable}{default})", None
    if row.default:
        on, off = f"{row.help} (the default)", f"{row.negative} ({row.variable}=0)"
    else:
        on = f"{row.help} ({row.variable}=1)"
        off = f"{row.negative} (the default; overrides {row.variable}=1)"
    return on, off if row.negative else None


def arguments(rows: Iterable[Option] = TABLE) -> list[Arg]:
    """The command-line options of ``rows``: ``--NAME`` and, for flags, ``--no-NAME``.

    Every default is None ("not given"): the variable or the table's default applies.
    """
    out: list[Arg] = []
    for row in rows:
        on, off = _described(row)
        common = {"dest": row.field, "default": None}
        if row.kind != FLAG:
            out.append((row.flag, {**common, "help": on, "metavar": row.metavar}))
            continue
        out.append((row.flag, {**common, "help": on, "action": "store_true"}))
        if off is not None:
            out.append((negative_flag(row), {**common, "help": off, "action": "store_false"}))
    return out


def add_arguments(container: Any, args: Iterable[Arg]) -> None:
    """Define ``args`` on an argparse parser or argument group."""
    for flag, keywords in args:
        container.add_argument(flag, **keywords)


def parse_leading(argv: Sequence[str], args: Iterable[Arg],
                  rest: bool = False) -> tuple[dict[str, object], list[str]] | None:
    """What argparse makes of a plain command line of ``args``, without argparse.

    Understood: exact option names, ``--opt value`` and ``--opt=value``. With ``rest``, the
    first ``--`` or word not starting with ``-`` starts the command (returned as it is);
    without, there is none. Returns ``(values by dest, command)``, or None for anything
    else (help, abbreviations, errors...): then argparse must decide.
    """
    values: dict[str, object] = {}
    known: dict[str, dict[str, Any]] = {}
    for flag, keywords in args:
        values.setdefault(keywords["dest"], keywords.get("default"))
        known[flag] = keywords
    i = 0
    while i < len(argv):
        token = argv[i]
        if rest and (token == "--" or not token.startswith("-")):
            return values, list(argv[i:])
        name, equals, value = token.partition("=")
        spec = known.get(name)
        if spec is None:
            return None
        i += 1
        action = spec.get("action", "store")
        if action != "store":
            if equals:
                return None
            values[spec["dest"]] = action == "store_true"
            continue
        if not equals:
            if i == len(argv):
                return None
            value = argv[i]
            i += 1
        choices = spec.get("choices")
        if not value or value.startswith("-") or (choices is not None and value not in choices):
            return None
        values[spec["dest"]] = value
    return values, []


def names() -> frozenset[str]:
    """Every name an option is known by: variables and flags (doctor sorts errors with it)."""
    return frozenset(
        name for row in TABLE
        for name in (row.variable, row.flag, *((negative_flag(row),) if row.negative else ())))


def given_in(args: object) -> dict[str, Any]:
    """The options given on a command line (an argparse namespace or a mapping by dest)."""
    # a mapping has keys(); a namespace its __dict__ (collections.abc is not loaded for this)
    values: Mapping[str, Any] = args if callable(getattr(args, "keys", None)) else vars(args)  # type: ignore[assignment]
    return {row.field: values[row.field] for row in TABLE if values.get(row.field) is not None}


# -- the output set (what --for chooses) ------------------------------------------------------
#: The variable that chooses the set of outputs, as ``--for`` does: how a choice made once in
#: the batch script reaches every task, and the only way to choose it for the task prolog.
FOR_VARIABLE = "SLURMENV_FOR"
#: The sets: ``render.OUTPUTS``' names.
OUTPUT_SETS = tuple(sorted(OUTPUTS))
FOR_HELP = (
    "which variables: torch (RANK, ..., MASTER_PORT), tf (TF_CONFIG), all (default: torch and "
    "tf) or torchrun (PET_NNODES, ...: options of one plain torchrun per node)")
#: ``--for``, which every resolving command takes (``console.add_resolution_options``) and
#: export/exec's parser without argparse reads (``commands.main.command_args``).
FOR: Arg = ("--for", {"dest": "for_", "default": None, "choices": OUTPUT_SETS,
                      "help": f"{FOR_HELP} (also {FOR_VARIABLE})"})


def outputs(environ: Mapping[str, str], given: str | None = None) -> str:
    """The set of outputs: ``--for`` (``given``) wins, else ``SLURMENV_FOR``, else ``all``."""
    if given:
        return given
    text = environ.get(FOR_VARIABLE, "").strip()
    if not text:
        return "all"
    if text not in OUTPUT_SETS:
        raise SlurmEnvError(
            f"{FOR_VARIABLE} is not a set of outputs", variable=FOR_VARIABLE, value=text,
            fix=f"use one of {', '.join(OUTPUT_SETS)} (what --for takes), or unset it for all")
    return text
