"""The pipeline: from one task's environment to its :class:`Resolution`.

:func:`resolve` conducts it, above the launchers (``launchers/`` imports nothing of this
module, nor of ``resolution`` or ``rivals``):

0. **marker**: the values slurmenv's task prolog set for another step are dropped
   (``worldguard.without_stale``), before anything is read; in a task with no Slurm job of
   its own they are kept as the marker's step's (or refused when part of them is missing);
1. **detect**: the first module of ``launchers.REGISTRY`` whose ``detect`` is true (or the one
   ``--launcher``/``SLURMENV_LAUNCHER`` names, refused when its ``detect`` is false);
2. **read**: its ``read`` gives a :class:`~slurmenv.launchers.base.Task`;
3. **fallback evidence**: the single-process default (the module marked ``FALLBACK``) is refused
   when /proc shows a Slurm task step whose variables were scrubbed (``launchers/evidence.py``);
4. **derive** (:func:`derive`): the address, the ports, the inherited checks and the bindings,
   the same for every launcher;
5. **rivals**: rank 0 of a launch with a ``launch_key`` runs this same pipeline on the other
   processes of its node (``rivals.find``) and refuses a MASTER_PORT another launch's rank 0
   also resolves to (``rivals.py`` holds the rules, this module the loop);
6. **world guard**, last (``worldguard.check``): the world read agrees with every detecting
   launcher's ``WORLD`` facts (an enclosing launcher's unless the task shows the enclosure:
   ``enclosure``), a world of one with every launcher's, and, with a chosen launcher, with
   the detected one's reading.

What :func:`derive` shares, so each rule lives once:

* inherited values: rank-like variables already set must agree with the task's own;
* ``MASTER_ADDR``: a value the launcher fixed > the explicit ``master_addr`` option > the
  launcher's rank-0 host through the address template (``{host}``), then DNS only if asked;
  no host: refused, asking for ``--master-addr``;
* ``MASTER_PORT``: a value the launcher fixed > the explicit ``--port``/``SLURMENV_PORT`` >
  an inherited ``MASTER_PORT`` > ports Slurm reserved > the formula from the launcher's port
  seed (``ports.block_ports``; ``ports.launch_ports`` for a task with a ``launch_key``, whose
  rank 0 :func:`resolve` then checks for rival launches) > a free port for a single process >
  refused, asking for ``--port``; every chosen port is checked against the ephemeral range;
* ports an MPI runtime binds itself (:data:`ports.RUNTIME_PORTS`: libpals's ``PMI_CONTROL_PORT``)
  are never ``MASTER_PORT`` nor a TensorFlow port, whichever step of the precedence chose them;
* GPU lists and thread counts (``gpus.py``, ``threads.py``) when the task's Slurm variables
  are its own.
"""

from __future__ import annotations

from . import ports, tfconfig, worldguard
from .errors import HOST_RULE, SlurmEnvError, check_host, host_problem, parse_int
from .launchers.base import Task
from .lean import TYPE_CHECKING
from .options import Options, given_as
from .render import RANK_FIELDS
from .resolution import Resolution
from .worldguard import without_stale

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any, TypeAlias

    from .launchers.base import AddressOf

    #: The other processes of a node for the rival check (``rivals.py``): ``FIND`` (read
    #: /proc when needed), ``(pid, environment)`` pairs, or None (not looked at).
    Rivals: TypeAlias = str | Iterable[tuple[int | None, Mapping[str, str]]] | None

#: Rank-like variables another layer (often the batch script) may have set: each must agree
#: with the task's own value, for every launcher, or the resolution is refused.
RANK_LIKE = tuple(RANK_FIELDS)
#: The :class:`Task` fields a Resolution carries as they are, under the same names: with
#: :func:`carried`, the one mapping from a launcher's Task to the Resolution.
CARRIED = (
    "launcher", "rank", "local_rank", "world_size", "local_world_size", "node_rank", "nnodes",
    "hostname", "topology", "job_id", "step_id", "fixed", "origin", "origin_fix", "label",
    "in_worker", "unknown",)
#: The other Task fields: what derive turns into the address, the ports, the sources, the notes
#: and the bindings (tests/test_registry.py: every Task field is in exactly one of the two).
CONSUMED = (
    "sources", "notes", "master_host", "master_source", "port_seed", "port_seed_source",
    "reserved_ports", "own_bindings", "free_port", "launch_key",)
#: slurmenv's task prolog's marker (``worldguard.py``, where it is applied before reading).
SET_BY = worldguard.SET_BY
EXPLICIT_ADDR_SOURCE = "given address (--master-addr or SLURMENV_MASTER_ADDR)"
ADDR_FIX = "pass the address of rank 0's node with --master-addr (or SLURMENV_MASTER_ADDR)"


# -- the conductor -----------------------------------------------------------------------------
#: ``step_evidence`` and ``rivals`` default: look in /proc (only when needed).
FIND = "find"
SCRUBBED_FIX = (
    "keep the Slurm variables where slurmenv runs (apptainer exec without --cleanenv/"
    "--containall, no env -i), or evaluate slurmenv before scrubbing and pass its variables in: "
    "srun -K sh -c 'env=$(slurmenv export) && eval \"$env\" && exec apptainer exec --cleanenv "
    "--env RANK=$RANK,... IMAGE python train.py' (or APPTAINERENV_* variables)")


def resolve(environ: Mapping[str, str], options: Options, ephemeral: tuple[int, int] | None,
            cpus: int | None = None, step_evidence: str | None = FIND,
            rivals: Rivals = FIND, enclosure: str | None = FIND) -> Resolution:
    """Detect, read, check the fallback's evidence, derive, check rivals (module docstring).

    ``step_evidence`` is local evidence of a Slurm task step for the single-process default
    (read from /proc by ``evidence.find`` unless given; None: no evidence). ``rivals``: the
    other processes of this node for rank 0 of a launch that is not a Slurm step (``FIND``:
    read from /proc when needed, None: not looked at). ``enclosure``: local evidence that the
    task's launcher runs inside the one whose variables it carries (``ENCLOSED_BY``: its agent
    among this process's ancestors), for the world guard (``FIND``: read from /proc when
    needed, None: none).
    """
    environ, stale_note = without_stale(environ)  # before anything is read
    if options.pmi != (environ.get("SLURMENV_PMI") == "1"):  # the launcher reads "1" only
        environ = {**environ, "SLURMENV_PMI": "1" if options.pmi else ""}
    module = worldguard.launcher_of(environ, options.launcher)
    task: Task = module.read(environ)  # the fallback refuses a stray launcher variable first
    if module.FALLBACK:
        if step_evidence == FIND:
            from .launchers import evidence

            step_evidence = evidence.find()
        if step_evidence:
            raise SlurmEnvError(
                "no Slurm (or other launcher) variable is set, yet this process runs inside a "
                f"Slurm job step: {step_evidence}. The environment was scrubbed (a container's "
                "--cleanenv, env -i): as a single process, every task would train alone",
                variable="SLURM_JOB_ID", value=None, fix=SCRUBBED_FIX)
    if stale_note:
        task = task._replace(notes=(*task.notes, stale_note))
    res = derive(task, environ, options, ephemeral, cpus)
    if task.launch_key is not None and task.rank == 0 and rivals is not None:
        check_rivals(task, environ, options, ephemeral, rivals)
    worldguard.check(  # last, on every path (docs/fail-closed.md)
        environ, task, module, options.launcher, enclosure)
    return res


def check_rivals(task: Task, environ: Mapping[str, str], options: Options,
                 ephemeral: tuple[int, int] | None, rivals: Rivals) -> None:
    """Rank 0 of a launch with a ``launch_key``: each process of another launch on this node
    (``rivals.find``, or the ``rivals`` given) goes through this same pipeline, without
    evidence or rivals of its own; a rank 0 with our MASTER_PORT refuses ours
    (``rivals.refuse_same_port``)."""
    from . import rivals as rival_launches  # rank 0 of an mpirun, a PALS mpiexec, a Flux job
    from .options import from_environ

    assert task.launch_key is not None
    found = rival_launches.find(*task.launch_key) if isinstance(rivals, str) else rivals or ()
    plan = port_plan(task, environ, options, ephemeral)
    given = rival_launches.command_line(options, environ)
    for pid, env, other_key in rival_launches.other_launches(task.launch_key, found):
        try:
            theirs = from_environ(env, **given)
            if worldguard.launcher_of(env, theirs.launcher).read(env).rank != 0:  # cheaper than a resolution:
                continue  # most are other ranks
            other = resolve(env, theirs, None, 1, None, None, None)
        except Exception:  # noqa: BLE001, S112 - another process's variables, however broken,
            # never crash this rank 0: a rank that cannot resolve never binds a port through
            # slurmenv
            continue
        rival_launches.refuse_same_port(task.launch_key, environ, plan, pid, other_key, other)


# -- derive: Task -> Resolution ---------------------------------------------------------------
def derive(task: Task, environ: Mapping[str, str], options: Options,
           ephemeral: tuple[int, int] | None, cpus: int | None = None) -> Resolution:
    """The Resolution of ``task``: address, ports, inherited checks and bindings added."""
    environ, stale_note = without_stale(environ)  # resolve() did it before reading
    notes = [*task.notes, *([stale_note] if stale_note and stale_note not in task.notes else [])]
    notes.extend(check_inherited(task, environ))
    master_addr, addr_source = address(task, options, environ)
    inherited_addr = environ.get("MASTER_ADDR")
    if inherited_addr and inherited_addr != master_addr:
        addr_source += f"; replaces the inherited MASTER_ADDR={inherited_addr}"
        notes.append(
            f"MASTER_ADDR={inherited_addr} was already set (inherited); replaced by this task's "
            f"{master_addr}: MASTER_ADDR describes the step")
    plan = port_plan(task, environ, options, ephemeral)
    if plan.variable == "MASTER_PORT" and "MASTER_PORT" not in task.fixed:
        notes.append(
            f"MASTER_PORT={plan.master} was already set (inherited): kept as your choice, not "
            "derived for this step; a step of this job running at the same time with its rank 0 "
            "on the same node would take the same port (unset it to get one per step)")
    topology = task.topology
    topology.use(plan, address_of(options, environ), ephemeral)
    sources = dict(task.sources)
    sources["MASTER_ADDR"] = addr_source
    sources["MASTER_PORT"] = plan.source
    tf_config = None
    if "TF_CONFIG" in task.fixed:
        tf_config = fixed_tf_config(task.fixed["TF_CONFIG"])
    else:
        tf_source = topology.tf_source()
        if tf_source:
            sources["TF_CONFIG"] = tf_source
        if environ.get("TF_CONFIG"):
            if tf_source:
                sources["TF_CONFIG"] = f"{tf_source}; replaces the inherited TF_CONFIG"
            notes.append(
                "TF_CONFIG was already set (inherited); slurmenv's replaces it where exported: "
                "TF_CONFIG describes the step")
    bindings, gpus, gpu_source, binding_sources, binding_notes = _bindings(
        task, environ, options, cpus)
    sources.update(binding_sources)
    notes.extend(binding_notes)
    return Resolution(
        **carried(task), master_addr=master_addr, master_port=plan.master, sources=sources,
        notes=notes, tf_chief=options.tf_chief, tf_jobs=options.tf_jobs, tf_config=tf_config,
        tf_jobs_from=tfconfig.jobs_from(options.tf_jobs, environ),
        bindings=bindings, gpus=gpus, gpu_source=gpu_source)


def carried(task: Task) -> dict[str, Any]:
    """The :data:`CARRIED` fields of ``task``, as keywords of :class:`Resolution`."""
    return {name: getattr(task, name) for name in CARRIED}


def check_inherited(task: Task, environ: Mapping[str, str]) -> list[str]:
    """Rank-like values another layer set (often the batch script) must agree with this
    task's own; values the launcher itself set (``task.fixed``) are the task's own."""
    notes = []
    for name in RANK_LIKE:
        inherited = environ.get(name)
        if inherited is None or inherited == "" or name in task.fixed:
            continue
        if name in task.unknown:  # it would stay in the task's environment, unchecked
            raise SlurmEnvError(
                f"{name}={inherited} is already set, and this task's own value cannot be known "
                f"here ({task.sources.get(name, task.launcher)}), so it cannot be checked or "
                "replaced", variable=name, value=inherited,
                fix=f"unset {name} before starting the tasks and let slurmenv set the others")
        mine = getattr(task, RANK_FIELDS[name])
        if inherited != str(mine):
            raise SlurmEnvError(
                f"{name}={inherited} is already set but this task's value is {mine} "
                f"({task.sources.get(name, task.launcher)}): it was probably exported in the "
                "batch script or by an outer launcher",
                variable=name, value=inherited,
                fix=f"unset {name} before starting the tasks (in a batch script: unset it before "
                "srun, or use srun --export=NONE) and let slurmenv set it in each task")
        notes.append(f"{name}={inherited} was already set and agrees")
    return notes


def address_of(options: Options, environ: Mapping[str, str] | None = None) -> AddressOf | None:
    """A host name -> address function: the address template, each address it makes checked
    (:func:`errors.check_host`); None without one (host names are addresses as they are: no
    call per host for a TF_CONFIG of 100,000 ranks; ``Topology.addresses`` checks them)."""
    template = options.addr_template
    if not template:
        return None

    def address(host: str, check: bool = True) -> str:
        if check:
            return _apply_template(host, options, environ)
        return template.format(host=host)  # Topology.addresses checks them all at once

    return address


def _apply_template(host: str, options: Options, environ: Mapping[str, str] | None) -> str:
    template = options.addr_template
    if not template:
        return host
    made = template.format(host=host)
    if host_problem(made) is not None:
        variable = given_as("addr_template", environ)
        check_host(
            variable, made, f"fix {variable} or the node name {host!r}: the result must be "
            f"{HOST_RULE}", what=f"the address {variable} makes of node {host!r},")
    return made


def address(task: Task, options: Options,
            environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``MASTER_ADDR`` and the sentence saying where it comes from."""
    if "MASTER_ADDR" in task.fixed:
        fixed = check_host("MASTER_ADDR", task.fixed["MASTER_ADDR"], f"set MASTER_ADDR to "
                           f"{HOST_RULE} ({task.sources.get('MASTER_ADDR', task.launcher)})")
        return fixed, task.sources.get("MASTER_ADDR", task.master_source)
    explicit = getattr(options, "master_addr", None)
    if explicit:
        return check_host(given_as("master_addr", environ), str(explicit), ADDR_FIX), \
            EXPLICIT_ADDR_SOURCE
    if task.master_host is None:
        raise SlurmEnvError(
            f"the address of rank 0 cannot be known here: {task.master_source}",
            variable="MASTER_ADDR", value=None, fix=ADDR_FIX)
    if not options.addr_template:
        check_host("MASTER_ADDR", task.master_host, ADDR_FIX + ", or fix the node name",
                   what=f"rank 0's node name (from the {task.launcher} launcher's variables)")
    master_addr = _apply_template(task.master_host, options, environ)
    source = task.master_source
    if options.addr_template:
        source += f", through the template {options.addr_template!r}"
    if options.resolve_addr:
        import socket  # only when asked: the one DNS lookup slurmenv makes

        try:
            master_addr = socket.gethostbyname(master_addr)
        except (OSError, UnicodeError) as exc:  # UnicodeError: not a valid name (idna)
            raise SlurmEnvError(
                f"cannot resolve the master node's name {master_addr!r} ({exc})",
                variable=given_as("resolve_addr", environ),
                value=(environ or {}).get("SLURMENV_RESOLVE_ADDR") or "given",
                fix="drop the resolve option to pass the name, or fix the name/template") from None
        source += ", resolved by DNS"
    return master_addr, source


def port_plan(task: Task, environ: Mapping[str, str], options: Options,
              ephemeral: tuple[int, int] | None) -> ports.Ports:
    """``MASTER_PORT`` and the TensorFlow ports by local rank, in the order of precedence
    (the rules of each step are ports.py's)."""
    if "MASTER_PORT" in task.fixed:
        text = task.fixed["MASTER_PORT"]
        master = parse_int("MASTER_PORT", text, minimum=1)
        return ports.Ports(
            master, [], task.sources.get("MASTER_PORT", f"MASTER_PORT={text}"), "MASTER_PORT")
    per_node = task.topology.largest_local() or task.local_world_size
    explicit: tuple[int, str, str] | None = None
    if options.port is not None:
        explicit = (options.port, ports.EXPLICIT_SOURCE, given_as("port", environ))
    elif environ.get("MASTER_PORT"):
        port = ports.parse_port(environ["MASTER_PORT"], "MASTER_PORT")
        explicit = (port, f"MASTER_PORT={port} already set (it wins)", "MASTER_PORT")
    if task.free_port:  # a single process on this machine: no other task to agree with
        return ports.single_process(explicit, options.port_range)
    taken = ports.runtime_ports(environ)
    if explicit is not None:
        plan = ports.following(*explicit, per_node, taken)
    elif task.reserved_ports is not None:
        plan = ports.reserved(*task.reserved_ports, per_node, taken)
    elif task.port_seed is not None:
        ports.check_range_outside(options.port_range, ephemeral, "SLURMENV_PORT_RANGE")
        plan = ports.formula(task.port_seed, task.port_seed_source, options.port_range,
                             per_node, taken, launch=task.launch_key is not None)
    else:
        raise SlurmEnvError(
            f"MASTER_PORT cannot be derived: {task.port_seed_source}",
            variable="MASTER_PORT", value=None, fix=ports.GIVE_PORT_FIX)
    ports.check_outside(plan.master, ephemeral, "MASTER_PORT", plan, environ)
    return plan


def fixed_tf_config(text: str) -> Callable[[], dict[str, Any]]:
    """A function giving a fresh copy of a TF_CONFIG another launcher set (checked JSON)."""
    import json  # only here: slurmenv export must not pay for it

    def tf_config() -> dict[str, Any]:
        return json.loads(text)  # type: ignore[no-any-return]

    return tf_config


def _bindings(
    task: Task, environ: Mapping[str, str], options: Options, cpus: int | None
) -> tuple[dict[str, str], tuple[str, ...] | None, str, dict[str, str], list[str]]:
    """This task's GPU lists (GPU binding) and unset thread counts, with sources and notes;
    ``cpus`` replaces the task's CPU affinity count (a replay gives the recorded one)."""
    if not task.own_bindings:
        note = (
            "GPU lists and thread counts left alone: the Slurm CPU/GPU variables here describe "
            f"another process, not this {task.launcher} rank")
        return {}, None, "", {}, [note]
    from . import gpus, threads

    gpu = gpus.plan(environ, task.local_rank, task.local_world_size, bind=options.bind_gpus)
    bindings = dict(gpu.env)
    sources = dict.fromkeys(gpu.env, gpu.source)
    notes = list(gpu.notes)
    if options.threads:
        counts = threads.plan(environ) if cpus is None else threads.plan(environ, lambda: cpus)
        bindings.update(counts.env)
        sources.update(dict.fromkeys(counts.env, counts.source))
        notes.extend(counts.notes)
    return bindings, gpu.gpus, gpu.source, sources, notes
