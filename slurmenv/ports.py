"""Ports: ``MASTER_PORT`` and one TensorFlow port per task on a node, from job and step IDs.

The formula (documented in the README):

* the port range ``LO-HI`` (default ``10000-32767``, option ``--port-range`` or
  ``SLURMENV_PORT_RANGE``) lies below the kernel's ephemeral range (32768-60999 by default);
* it is cut into ``JOB_SLOTS`` = 1000 job blocks of ``W = (HI - LO + 1) // 1000`` ports
  (22 by default); job ``J`` owns block ``J mod 1000``, so jobs whose IDs differ by less than
  1000 never share a port;
* step ``S`` of the job uses offset ``S mod W`` of the block as ``MASTER_PORT`` and the next
  ``T`` offsets (wrapping inside the block) as the TensorFlow ports of its ``T`` tasks per node.
  Concurrent steps never share ``MASTER_PORT`` unless their IDs differ by a multiple of ``W``.

A launch that is not a Slurm step and whose ranks share a launch ID that is not a small
sequential number (Open MPI's ``mpirun``, a PBS PALS ``mpiexec``, a Flux job) takes
:func:`launch_ports`: any port of the range outside its job's own block, by the launch ID, so
never a port of the job's own steps.

When Slurm reserved ports for the step (``SLURM_STEP_RESV_PORTS``, from ``--resv-ports`` or
``MpiParams=ports=``) those are used instead: the first is ``MASTER_PORT``, the next ones the
TensorFlow ports. An explicit port (``--port``, ``SLURMENV_PORT`` or ``MASTER_PORT``) wins.
"""

from __future__ import annotations

from .errors import SlurmEnvError, is_number
from .lean import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The lowest port slurmenv gives or takes: the ports below are privileged (root binds them).
FIRST_PORT = 1024
#: The highest TCP port.
LAST_PORT = 65535
#: Where a port must lie, as messages write it.
PORTS_TEXT = f"{FIRST_PORT}-{LAST_PORT}"
JOB_SLOTS = 1000
DEFAULT_RANGE = (10000, 32767)
EPHEMERAL_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
RANGE_FIX = "give a range like '10000-32767' (SLURMENV_PORT_RANGE or --port-range) of at least " \
    f"{2 * JOB_SLOTS} ports between {FIRST_PORT} and the start of the ephemeral range"


#: The fix for a port that is not one (parse_port; the options table's PORT kind).
PORT_FIX = (f"use a port number between {FIRST_PORT} and {LAST_PORT} (or unset it to let "
            "slurmenv choose)")
#: The fix for a port inside the ephemeral range (ports.check_outside, doctor's ports check).
EPHEMERAL_FIX = "choose ports below the ephemeral range with SLURMENV_PORT_RANGE or --port-range"


def resv_ports(per_node: int | None = None) -> str:
    """The srun option that makes Slurm reserve the step's ports (``SLURM_STEP_RESV_PORTS``):
    MASTER_PORT and one TensorFlow port per task of a node. ``per_node``: the most tasks on
    one node, when known. The one wording of this advice (ports, slurm launcher, doctor)."""
    if per_node is None:
        return "srun --resv-ports=N, N = tasks per node + 1"
    return f"srun --resv-ports={per_node + 1}"


#: The variables (and option) through which a user gives the port: ``Ports.variable`` is one
#: of them when the port was given, not derived.
GIVEN = ("MASTER_PORT", "SLURMENV_PORT", "--port")


class Ports(NamedTuple):
    """The step's ``MASTER_PORT`` and the TensorFlow port of each local rank, with their origin."""

    master: int
    tf: list[int]
    source: str
    #: The variable (or option) the ports come from, named when they do not suffice.
    variable: str = "SLURMENV_PORT_RANGE"


def parse_range(text: str, variable: str) -> tuple[int, int]:
    """Parse ``LO-HI`` into a checked port range."""
    lo_text, dash, hi_text = text.partition("-")
    if not (dash and is_number(lo_text) and is_number(hi_text)):
        raise SlurmEnvError("port range must be LO-HI", variable=variable, value=text, fix=RANGE_FIX)
    lo, hi = int(lo_text), int(hi_text)
    if lo < FIRST_PORT or hi > LAST_PORT or hi - lo + 1 < 2 * JOB_SLOTS:
        raise SlurmEnvError(
            f"port range {lo}-{hi} is outside {PORTS_TEXT} or smaller than {2 * JOB_SLOTS} ports",
            variable=variable, value=text, fix=RANGE_FIX)
    return lo, hi


def parse_port(text: str, variable: str) -> int:
    """Parse one TCP port number (FIRST_PORT-LAST_PORT)."""
    if not is_number(text) or not FIRST_PORT <= int(text) <= LAST_PORT:
        raise SlurmEnvError(
            "not a usable TCP port",
            variable=variable, value=text, fix=PORT_FIX)
    return int(text)


def parse_port_list(text: str, variable: str, limit: int | None = None) -> list[int]:
    """Parse Slurm's port list (``12000-12003`` or ``12000,12002-12003``): ports FIRST_PORT-LAST_PORT,
    no port twice. Only the first ``limit`` ports are expanded (all when None: at most the
    64,512 ports there are, since none may repeat); every part is checked all the same."""
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        lo, dash, hi = part.partition("-")
        if (
            not is_number(lo)
            or (dash and not is_number(hi))
            or not FIRST_PORT <= int(lo) <= int(hi or lo) <= LAST_PORT
        ):
            raise SlurmEnvError(
                "not a Slurm port list",
                variable=variable, value=text,
                fix=f"it must look like '12000-12003' or '12000,12005' (ports {PORTS_TEXT}, "
                "low-high ranges)")
        ranges.append((int(lo), int(hi or lo)))
    ordered = sorted(ranges)
    for (_, end), (start, _) in zip(ordered, ordered[1:]):
        if start <= end:
            raise SlurmEnvError(
                f"port {start} is listed twice",
                variable=variable, value=text,
                fix="each port may be listed once: Slurm never reserves a port twice; give the "
                "list Slurm wrote, or one port with --port")
    ports: list[int] = []
    for lo_port, hi_port in ranges:
        if limit is not None and len(ports) >= limit:
            break
        stop = hi_port + 1 if limit is None else min(hi_port + 1, lo_port + limit - len(ports))
        ports.extend(range(lo_port, stop))
    return ports


def stable_hash(text: str) -> int:
    """FNV-1a (32 bits) of ``text``, the same in every process (``hash()`` is salted): turns a
    launcher's job or launch ID that is not a small sequential number (a PALS APID, a Flux
    job ID whose low bits are a per-millisecond sequence) into a port seed spread like one."""
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def block_ports(job_id: int, step_id: int, port_range: tuple[int, int], tasks_here: int) -> Ports:
    """The formula: job block ``job_id % 1000``, offset ``step_id % W`` inside it."""
    lo, hi = port_range
    width = (hi - lo + 1) // JOB_SLOTS
    base = lo + (job_id % JOB_SLOTS) * width
    offset = step_id % width
    tf = [base + (offset + 1 + k) % width for k in range(min(tasks_here, width - 1))]
    source = (
        f"port range {lo}-{hi}: job block {job_id} % {JOB_SLOTS} = {job_id % JOB_SLOTS} of "
        f"{width} ports starting at {base}, step {step_id} -> offset {offset}")
    return Ports(base + offset, tf, source)


def launch_ports(job_id: int, launch_id: int, port_range: tuple[int, int],
                 tasks_here: int = 0) -> Ports:
    """A launch of job ``job_id`` that is not one of its Slurm steps and whose ID is not a small
    sequential number (an Open MPI ``mpirun``, a PBS PALS ``mpiexec``, a Flux job):
    ``MASTER_PORT`` is port ``launch_id mod (R - W)`` of the range without the job's own block
    (``R`` ports in the range, ``W`` in a block: 22,746 by default), and the TensorFlow ports of
    the ``tasks_here`` tasks of a node the ones after it there. Never a port of the job's steps;
    two launches share ``MASTER_PORT`` only when their IDs are equal modulo ``R - W``, and then
    rank 0 refuses (``rivals.py``)."""
    lo, hi = port_range
    width = (hi - lo + 1) // JOB_SLOTS
    own = lo + (job_id % JOB_SLOTS) * width
    span = hi - lo + 1 - width

    def port(index: int) -> int:
        return lo + index if lo + index < own else lo + index + width

    index = launch_id % span
    tf = [port((index + 1 + k) % span) for k in range(min(tasks_here, span - 1))]
    source = (
        f"port range {lo}-{hi} without job {job_id}'s own block {own}-{own + width - 1} "
        f"({span} ports): launch {launch_id} % {span} = {index}")
    return Ports(port(index), tf, source)


def ephemeral_range(path: str = EPHEMERAL_FILE) -> tuple[int, int] | None:
    """This node's ephemeral port range, or None where the kernel does not say."""
    try:
        with open(path, "rb") as handle:  # bytes: no codec to import on export's path
            lo, hi = handle.read().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return None


def check_range_outside(port_range: tuple[int, int], ephemeral: tuple[int, int] | None,
                        variable: str) -> None:
    """Refuse a formula range that overlaps the ephemeral range, whatever the job ID: a port
    inside it may be taken by any outgoing connection, and the job IDs that land there vary."""
    lo, hi = port_range
    if ephemeral and lo <= ephemeral[1] and ephemeral[0] <= hi:
        raise SlurmEnvError(
            f"port range {lo}-{hi} overlaps this node's ephemeral port range "
            f"{ephemeral[0]}-{ephemeral[1]} (any outgoing connection may take a port there)",
            variable=variable, value=f"{lo}-{hi}",
            fix="choose a range below the ephemeral range with SLURMENV_PORT_RANGE or "
            f"--port-range (or give a port with --port, or reserve ports with {resv_ports()})")


def in_ephemeral(port: int, ephemeral: tuple[int, int] | None) -> bool:
    """Whether ``port`` lies in the ephemeral range (False when the range is unknown)."""
    return ephemeral is not None and ephemeral[0] <= port <= ephemeral[1]


def check_outside(port: int, ephemeral: tuple[int, int] | None, what: str,
                  plan: Ports | None = None, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a port inside the ephemeral range: an outgoing connection may take it any time.

    With ``plan``, the error names where the port came from (an explicit port, Slurm's
    reservation) and the fix for that; else the kernel's range and the formula's range."""
    if ephemeral is None or not in_ephemeral(port, ephemeral):
        return
    message = (f"{what} {port} is inside this node's ephemeral port range {ephemeral[0]}-"
               f"{ephemeral[1]} (any outgoing connection may take it)")
    variable = plan.variable if plan is not None else "SLURMENV_PORT_RANGE"
    value = (environ or {}).get(variable)
    if variable in GIVEN:
        fix = (f"choose a port below {ephemeral[0]} ({variable}), or unset it to let slurmenv "
               "choose one")
        value = value or str(port)
    elif variable == "SLURM_STEP_RESV_PORTS":
        fix = (f"Slurm reserved ports inside the ephemeral range: set MpiParams=ports= below "
               f"{ephemeral[0]} in slurm.conf, or give a port with --port")
    else:
        variable, value = "net.ipv4.ip_local_port_range", f"{ephemeral[0]} {ephemeral[1]}"
        fix = EPHEMERAL_FIX
    raise SlurmEnvError(message, variable=variable, value=value, fix=fix)


#: Variables naming ports an MPI runtime binds itself on every node of the launch: libpals's
#: PMI_CONTROL_PORT (HPE PALS mpiexec; Slurm's cray_shasta hands it the step's first reserved
#: port, observed in tests/fixtures/pals/; Flux's cray-pals plugin). The same list on every
#: node, so skipping them keeps all tasks in agreement.
RUNTIME_PORTS = ("PMI_CONTROL_PORT",)


def runtime_ports(environ: Mapping[str, str]) -> dict[int, str]:
    """Port -> ``NAME=value`` for every port an MPI runtime binds itself (never ours)."""
    taken: dict[int, str] = {}
    for name in RUNTIME_PORTS:
        text = environ.get(name)
        if text:
            for port in parse_port_list(text, name):
                taken[port] = f"{name}={text}"
    return taken


def too_few_tf_ports(plan: Ports, needed: int, environ: Mapping[str, str]) -> SlurmEnvError:
    """TF_CONFIG needs ``needed`` ports per node; the error names where the ports came from
    (every launcher whose topology builds TF_CONFIG raises this one)."""
    message = (
        f"TF_CONFIG needs {needed} ports per node but only {len(plan.tf)} are available "
        f"({plan.source})")
    without = "or export without TF_CONFIG (--for torch)"
    reserve = needed + len(runtime_ports(environ))
    if plan.variable == "SLURM_STEP_RESV_PORTS":
        fix = (f"reserve enough ports: {resv_ports(reserve)} (MASTER_PORT and one "
               f"TensorFlow port per task on a node), {without}")
    elif plan.variable in GIVEN:
        fix = (f"the TensorFlow ports follow {plan.variable} and would pass {LAST_PORT}: choose a "
               f"lower port, {without}")
    elif environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"):
        fix = (f"use a wider --port-range (SLURMENV_PORT_RANGE), reserve ports with "
               f"{resv_ports(reserve)}, {without}")
    else:
        fix = f"use a wider --port-range (SLURMENV_PORT_RANGE), {without}"
    value = environ.get(plan.variable)
    return SlurmEnvError(message, variable=plan.variable, value=value, fix=fix)


# -- the port plan's rules (pipeline.port_plan applies them in the order of precedence) -----
FREE_PORT_SOURCE = "a port free on 127.0.0.1 now (single process)"
EXPLICIT_SOURCE = "given port (--port or SLURMENV_PORT)"
GIVE_PORT_FIX = "give a port with --port (or SLURMENV_PORT), the same in every task"


def runtime_refused(port: int, why: str, taken: dict[int, str], variable: str) -> SlurmEnvError:
    return SlurmEnvError(
        f"{why} would make MASTER_PORT {port}, which {taken[port]} gives the MPI runtime "
        "(libpals binds it itself)", variable=variable, value=str(port),
        fix="choose another port (--port or SLURMENV_PORT), the same in every task")


def single_process(explicit: tuple[int, str, str] | None, port_range: tuple[int, int]) -> Ports:
    """A single process: the port given, else a free one; its TensorFlow port a free one."""
    master, why, variable = explicit or (free_port(port_range), FREE_PORT_SOURCE, "--port")
    return Ports(master, [free_port(port_range, avoid=master)], why, variable)


def following(port: int, why: str, variable: str, per_node: int, taken: dict[int, str]) -> Ports:
    """A port given (``--port``, an inherited ``MASTER_PORT``): the TensorFlow ports follow
    it, skipping the MPI runtime's (``taken``)."""
    if port in taken:
        raise runtime_refused(port, why, taken, variable)
    tf = [port + 1 + k for k in range(per_node + len(taken)) if port + 1 + k <= LAST_PORT]
    tf = [p for p in tf if p not in taken][:per_node]
    return Ports(port, tf, f"{why}; TensorFlow ports follow it", variable)


def reserved(variable: str, text: str, per_node: int, taken: dict[int, str]) -> Ports:
    """Ports Slurm reserved (``SLURM_STEP_RESV_PORTS``) without the MPI runtime's."""
    # as many as a resolution can use: MASTER_PORT, a TF port per local rank, and those
    # the MPI runtime takes for itself
    listed = parse_port_list(text, variable, limit=per_node + 1 + len(taken))
    source = f"{variable}={text} (reserved by Slurm)"
    skipped = sorted({p for p in listed if p in taken})
    if skipped:
        listed = [p for p in listed if p not in taken]
        names = sorted({taken[p] for p in skipped})
        source += f" without {', '.join(map(str, skipped))} ({', '.join(names)}: the MPI " \
            "runtime's own)"
    if not listed:
        raise SlurmEnvError(
            f"every port of {variable}={text} is the MPI runtime's own "
            f"({', '.join(sorted(set(taken.values())))})", variable=variable, value=text,
            fix=f"reserve more ports with srun --resv-ports={per_node + 1 + len(skipped)}, "
            "or give a port with --port")
    return Ports(listed[0], listed[1:], source, variable)


def formula(seed: tuple[int, int], seed_source: str, port_range: tuple[int, int],
            per_node: int, taken: dict[int, str], *, launch: bool) -> Ports:
    """The formula on the launcher's port seed (job, step or launch): :func:`block_ports`, or
    :func:`launch_ports` for a launch that is not a step (outside the job's block)."""
    job, step = seed
    plan = (launch_ports if launch else block_ports)(job, step, port_range, per_node)
    if plan.master in taken:
        raise runtime_refused(plan.master, "the port formula", taken, "MASTER_PORT")
    return Ports(plan.master, [p for p in plan.tf if p not in taken],
                 f"{plan.source} (from {seed_source})")


def free_port(port_range: tuple[int, int], avoid: int = 0) -> int:
    """A TCP port of ``port_range`` that is free on 127.0.0.1 right now: chosen in the range
    (below the ephemeral range), not by the kernel, which would pick one inside it; the
    search starts at a point derived from the PID."""
    import os
    import socket  # the single-process fallback only

    lo, hi = port_range
    span = hi - lo + 1
    start = os.getpid() * 7919 % span
    for k in range(span):
        port = lo + (start + k) % span
        if port == avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SlurmEnvError(
        f"no free port on 127.0.0.1 in {lo}-{hi}", variable="SLURMENV_PORT_RANGE",
        value=f"{lo}-{hi}", fix="give another range with SLURMENV_PORT_RANGE or --port-range")
