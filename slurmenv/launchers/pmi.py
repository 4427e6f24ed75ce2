"""Slurm's PMI (``srun --mpi=pmi2``): ask the step itself which node each rank runs on.

Under ``srun --mpi=pmi2`` (or ``MpiDefault=pmi2``) every task inherits ``PMI_FD``, a socket to
its node's ``slurmstepd``, which speaks PMI-1's text protocol (``src/plugins/mpi/pmi2/pmi1.c``,
the same from 22.05 to 26.05): ``cmd=init``, ``get_my_kvsname``, ``put``, ``barrier_in`` ->
``barrier_out`` (a fence over every task of the step), ``get``. The lowest rank of each node
puts one key, ``slurmenv-node-<SLURM_NODEID>``, holding its node's name and ranks
(``SLURMD_NODENAME``, ``SLURM_GTIDS`` as ranges); after the fence every task gets one key per
node, so it reads the whole layout in O(nodes) requests.

Two traps of the server, read in its source: ``finalize`` shuts the socket down, so it is never
sent, and the fd is never closed (os.read/os.write on the number, no socket object). The
server answers ``cmd=init`` once per task (``agent.c``, ``initialized[lrank]``): an MPI
library initialised later in the same task sends its own ``cmd=init`` and gets no answer
(observed: docs/releases.md), which is why asking is opt-in (``SLURMENV_PMI``).

Every wait is bounded by ``SLURMENV_PMI_TIMEOUT`` seconds (default :data:`DEFAULT_TIMEOUT`);
a fence that not every task joins, a server that does not answer or answers nonsense is a
refusal naming ``PMI_FD``; a reply line longer than :data:`MAX_LINE` is refused unread.
"""

from __future__ import annotations

from ..errors import SlurmEnvError, parse_int
from ..lean import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

FD_VARIABLE = "PMI_FD"
#: The switch (options.py's row ``pmi``): on, every task of the step asks.
SWITCH = "SLURMENV_PMI"
TIMEOUT_VARIABLE = "SLURMENV_PMI_TIMEOUT"
#: Seconds: tasks of one step reach the fence within the time their programs take to start
#: (``slurmenv exec``: a tenth of a second; a Python program that imports torch first: several
#: seconds on a loaded node); a minute covers both and still ends a stuck step soon.
DEFAULT_TIMEOUT = 60.0
#: Slurm's limits (``pmi.h``, every release): a value holds at most 1024 bytes.
MAX_VALUE = 1024
#: Longest reply line read: ``cmd=get_result rc=0 value=`` and a value of MAX_VALUE bytes.
MAX_LINE = MAX_VALUE + 64
KEY = "slurmenv-node-"
FIX = ("start every task of the step with slurmenv under srun --mpi=pmi2 (each task joins the "
       "exchange), or turn the exchange off: SLURMENV_PMI=0 / --no-pmi")


def _refuse(what: str, value: str | None, fix: str = FIX) -> SlurmEnvError:
    return SlurmEnvError(f"Slurm's PMI (PMI_FD): {what}", variable=FD_VARIABLE, value=value, fix=fix)


def wanted(environ: Mapping[str, str], ntasks: int) -> bool:
    """Whether this task asks: ``SLURMENV_PMI=1`` (the pipeline writes the option's value so),
    from variables every task of the step has alike, so every task decides the same. On
    without Slurm's PMI (``PMI_FD``, and ``PMI_SIZE`` equal to the step's task count) is
    refused, alike in every task."""
    if environ.get(SWITCH) != "1":
        return False
    size = environ.get("PMI_SIZE")
    if not environ.get(FD_VARIABLE) or size != str(ntasks):
        raise SlurmEnvError(
            f"the exchange through Slurm's PMI is on ({SWITCH}, --pmi) but this task has no PMI "
            f"of its step (PMI_SIZE={size}, SLURM_STEP_NUM_TASKS={ntasks})",
            variable=FD_VARIABLE, value=environ.get(FD_VARIABLE),
            fix="start the step with srun --mpi=pmi2, or turn the exchange off (SLURMENV_PMI=0)")
    return True


def timeout(environ: Mapping[str, str]) -> float:
    """``SLURMENV_PMI_TIMEOUT`` in seconds (a positive number, at most a day), or the default."""
    text = environ.get(TIMEOUT_VARIABLE, "")
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400 or len(text) > 32:
        raise SlurmEnvError("not a number of seconds between 0 and 86400",
                            variable=TIMEOUT_VARIABLE, value=text,
                            fix=f"set it to the seconds a task waits for the others, e.g. "
                            f"{int(DEFAULT_TIMEOUT)}")
    return value


class Client:
    """PMI-1 over an inherited fd: every call sends one line and reads one reply line, each
    wait bounded by the deadline (``time.monotonic()``), each line by :data:`MAX_LINE`."""

    def __init__(self, fd: int, seconds: float, fd_text: str) -> None:
        import time

        self.fd, self.fd_text, self.seconds = fd, fd_text, seconds
        self.deadline = time.monotonic() + seconds
        self.buffer = b""

    def _send(self, line: str) -> None:
        import os

        data = line.encode()
        try:
            while data:  # one write in practice (the server reads a command in one read)
                self._wait(4, "accept a request")
                data = data[os.write(self.fd, data):]
        except OSError as exc:
            raise _refuse(f"cannot send {line.split()[0]!r}: {exc.strerror}", self.fd_text) from None

    def _wait(self, event: int, what: str) -> None:
        import select
        import time

        poller = select.poll()
        poller.register(self.fd, event)
        left = self.deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            raise _refuse(
                f"the step's slurmstepd did not {what} within {self.seconds:g} s "
                f"({TIMEOUT_VARIABLE}): not every task of the step asked it (a program that runs "
                "slurmenv in some tasks only, or a task that failed before), this task asked "
                "before (Slurm answers one init per task: slurmenv or an MPI library ran "
                "first), or it does not answer",
                self.fd_text)

    def _line(self, what: str) -> dict[str, str]:
        import os

        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE:
                raise _refuse(f"a reply longer than {MAX_LINE} bytes while waiting to {what}",
                              self.fd_text)
            self._wait(1, what)  # POLLIN
            try:
                chunk = os.read(self.fd, MAX_LINE + 1)
            except OSError as exc:
                raise _refuse(f"cannot read while waiting to {what}: {exc.strerror}",
                              self.fd_text) from None
            if not chunk:
                raise _refuse(f"the step's slurmstepd closed the socket while waiting to {what} "
                              "(was PMI finalized before, or is the step ending?)", self.fd_text)
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        if len(line) > MAX_LINE:
            raise _refuse(f"a reply longer than {MAX_LINE} bytes while waiting to {what}",
                          self.fd_text)
        fields: dict[str, str] = {}
        for word in line.decode("ascii", "replace").split(" "):
            key, found, value = word.partition("=")
            if found:
                fields.setdefault(key, value)
        return fields

    def request(self, line: str, answer: str, what: str) -> dict[str, str]:
        """Send ``line``; the reply, refused unless its ``cmd`` is ``answer`` with ``rc=0``."""
        self._send(line + "\n")
        reply = self._line(what)
        if reply.get("cmd") != answer or reply.get("rc", "0") != "0":
            shown = " ".join(f"{k}={v}" for k, v in reply.items())[:200]
            raise _refuse(f"the reply to {line.split()[0]!r} is {shown!r}, not cmd={answer} rc=0",
                          self.fd_text, "run slurmenv under srun --mpi=pmi2 before any MPI "
                          "library initialises in the task (PMI answers one init per task), or "
                          "turn the exchange off: SLURMENV_PMI=0 / --no-pmi")
        return reply

    def init(self) -> str:
        """``cmd=init`` (PMI 1.1), then the key-value space's name."""
        self.request("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init",
                     "answer init")
        name = self.request("cmd=get_my_kvsname", "my_kvsname", "tell the key-value space")
        kvs = name.get("kvsname", "")
        if not kvs or len(kvs) > 256:
            raise _refuse(f"the key-value space's name is {kvs[:64]!r}", self.fd_text)
        return kvs

    def put(self, kvs: str, key: str, value: str) -> None:
        self.request(f"cmd=put kvsname={kvs} key={key} value={value}", "put_result",
                     f"store {key}")

    def fence(self) -> None:
        self.request("cmd=barrier_in", "barrier_out", "end the fence (barrier_out)")

    def get(self, kvs: str, key: str) -> str:
        reply = self.request(f"cmd=get kvsname={kvs} key={key}", "get_result", f"read {key}")
        return reply.get("value", "")


def ranges(ranks: Sequence[int]) -> str:
    """``0,1,2,3,8`` -> ``0-3,8``: a node's ranks in few bytes."""
    parts: list[str] = []
    start = prev = ranks[0]
    for rank in [*ranks[1:], None]:
        if rank is not None and rank == prev + 1:
            prev = rank
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if rank is not None:
            start = prev = rank
    return ",".join(parts)


def unranges(text: str, most: int) -> list[int]:
    """The inverse of :func:`ranges`, refused (ValueError) past ``most`` ranks."""
    ranks: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        if not (first.isdigit() and (not last or last.isdigit())) or len(part) > 24:
            raise ValueError(part)
        low, high = int(first), int(last or first)
        if high < low or len(ranks) + high - low + 1 > most:
            raise ValueError(part)
        ranks.extend(range(low, high + 1))
    return ranks


#: What this process was told, by (PMI_FD, job, step, rank): Slurm answers one init per task,
#: so a second resolution in the same process (doctor, resolve() called twice) reuses it.
_TOLD: dict[tuple[str, ...], list[tuple[str, list[int]]]] = {}


def exchange(environ: Mapping[str, str], nodeid: int, nnodes: int, ntasks: int, host: str,
             gtids: Sequence[int]) -> list[tuple[str, list[int]]]:
    """Every node's (name, ranks), by SLURM_NODEID, through the step's PMI: this task puts its
    node's entry if it is the node's lowest rank, then fences and reads every node's (once per
    process and task: :data:`_TOLD`)."""
    key = tuple(environ.get(name, "") for name in (FD_VARIABLE, "SLURM_JOB_ID", "SLURM_STEP_ID",
                                                   "SLURM_PROCID"))
    if key not in _TOLD:
        _TOLD[key] = _exchange(environ, nodeid, nnodes, ntasks, host, gtids)
    return [(name, list(ranks)) for name, ranks in _TOLD[key]]


def _exchange(environ: Mapping[str, str], nodeid: int, nnodes: int, ntasks: int, host: str,
              gtids: Sequence[int]) -> list[tuple[str, list[int]]]:
    fd_text = environ.get(FD_VARIABLE, "")
    fd = parse_int(FD_VARIABLE, fd_text, fix="run under srun --mpi=pmi2, which sets it")
    import os
    import stat

    try:
        is_socket = stat.S_ISSOCK(os.fstat(fd).st_mode)
    except (OSError, OverflowError):  # OverflowError: past a C int, no fd of this process
        is_socket = False
    if not is_socket:
        raise _refuse(f"fd {fd} is not an open socket in this process", fd_text,
                      "run slurmenv in the srun --mpi=pmi2 task itself (or a process it "
                      "starts without closing its fds), or turn the exchange off: "
                      "SLURMENV_PMI=0 / --no-pmi")
    client = Client(fd, timeout(environ), fd_text)
    kvs = client.init()
    mine = ranges(sorted(gtids))
    entry = f"{host}/{mine}"
    if len(entry) > MAX_VALUE:
        raise _refuse(f"this node's entry takes {len(entry)} bytes, more than PMI's {MAX_VALUE}",
                      fd_text, "turn the exchange off: SLURMENV_PMI=0 / --no-pmi")
    if min(gtids) == int(environ.get("SLURM_PROCID", "-1")):
        client.put(kvs, f"{KEY}{nodeid}", entry)
    client.fence()
    found: list[tuple[str, list[int]]] = []
    for node in range(nnodes):
        value = client.get(kvs, f"{KEY}{node}")
        name, _, listed = value.partition("/")
        try:
            ranks = unranges(listed, ntasks)
        except ValueError:
            raise _refuse(f"node {node}'s entry is {value[:100]!r}, not NAME/RANKS", fd_text)
        found.append((name, ranks))
    return found
