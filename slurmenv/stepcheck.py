"""The step check: every task of a step meets rank 0 on the step's own address and port before
training, so a step that cannot start says which rank and why, in seconds
(``srun slurmenv doctor --step``, ``slurmenv exec --preflight -- CMD``).

Rank 0 listens on ``MASTER_PORT`` (all interfaces, as torch's store does) for a bounded time;
every other task connects to ``MASTER_ADDR:MASTER_PORT`` with retries and sends one line of
what it resolved. Rank 0 checks that every rank arrived once and that all agree, answers each
task with the verdict, and closes every socket before it returns: the port is free again for
the training that follows (the clients close first, so rank 0's side keeps no TIME_WAIT).

The protocol, each message capped at :data:`MAX_MESSAGE` bytes and each connection at
:data:`HANDSHAKE_SECONDS` to say who it is::

    task -> rank 0:  "slurmenv-stepcheck 1\\n" + one JSON object (the task's facts) + "\\n"
    rank 0 -> task:  "slurmenv-stepcheck 1\\n" + {"ok": bool, "line": str} + "\\n"

A connection that does not speak it (another program, a port scanner, an older slurmenv) is
refused and counted, never trusted. Rank 0 keeps at most ``WORLD_SIZE`` connections.

A task whose ``MASTER_PORT`` was overridden on its node (``SLURMENV_PORT``, an inherited
``MASTER_PORT``) cannot reach a rank 0 that uses another port; both sides therefore also use
the port the step would have without the override (rank 0 listens on it too, a task tries it
after its own), so the report names the disagreement instead of a mere absence.

Only ``socket``, ``json``, ``selectors`` and ``time`` of the standard library: imported by
``doctor --step`` and ``exec --preflight`` alone, never on ``export``'s path.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from . import __version__, options, resolve
from .errors import SlurmEnvError, printable
from .resolution import Resolution

MAGIC = b"slurmenv-stepcheck 1\n"
MAX_MESSAGE = 16384  # bytes of one message (magic line + JSON line)
HANDSHAKE_SECONDS = 5.0  # a connection must have said who it is within this
DEFAULT_TIMEOUT = 30.0
TIMEOUT_VARIABLE = "SLURMENV_STEP_TIMEOUT"
TIMEOUT_FIX = f"give seconds, e.g. {TIMEOUT_VARIABLE}=30 or --step-timeout 30 (1 to 3600)"
#: A task waits this long past the timeout for rank 0's verdict (rank 0 may start later).
VERDICT_GRACE = 10.0
MAX_SHOWN = 20  # problem lines shown before "... and N more"
_STRING_CAP = 400  # characters of any string a task sends


def parse_timeout(text: str, variable: str = TIMEOUT_VARIABLE) -> float:
    """Seconds of the step check: a number from 1 to 3600; SlurmEnvError naming ``variable``."""
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not 1.0 <= value <= 3600.0:  # also NaN
        raise SlurmEnvError("the step check's timeout must be seconds from 1 to 3600",
                            variable=variable, value=text, fix=TIMEOUT_FIX)
    return value


def timeout_from(environ: Mapping[str, str], given: str | None = None) -> float:
    """``--step-timeout`` (``given``), else ``SLURMENV_STEP_TIMEOUT``, else 30 s."""
    if given is not None:
        return parse_timeout(given, "--step-timeout")
    text = environ.get(TIMEOUT_VARIABLE, "")
    return parse_timeout(text) if text.strip() else DEFAULT_TIMEOUT


# -- what a task says -----------------------------------------------------------------------
def _cap(value: object) -> object:
    if isinstance(value, str):
        return value[:_STRING_CAP]
    return value


def tf_digest(res: Resolution) -> str | None:
    """8 hex digits of TF_CONFIG's worker list (as ``show --one-line``'s ``cluster=``)."""
    import hashlib

    try:
        cluster = res.tf_config.get("cluster", {})
    except SlurmEnvError:
        return None
    return hashlib.sha1(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:8]


def facts_of(res: Resolution, opts: Mapping[str, Any]) -> dict[str, Any]:
    """What a task sends rank 0 (and what rank 0 compares with its own)."""
    def known(name: str, value: int) -> int | None:
        return None if name in res.unknown else value

    return {
        "rank": res.rank,
        "world_size": res.world_size,
        "node": _cap(res.hostname or socket.gethostname()),
        "hostname": _cap(socket.gethostname()),
        "node_rank": known("NODE_RANK", res._node_rank),
        "nnodes": known("NNODES", res._nnodes),
        "master_addr": _cap(res.master_addr),
        "master_port": res.master_port,
        "tf_digest": tf_digest(res),
        "launcher": _cap(res.launcher),
        "job": _cap(res.job_id), "step": _cap(res.step_id),
        "version": __version__,
        # the port is compared as MASTER_PORT, with where it came from
        "options": {k: _cap(str(v)) for k, v in sorted(opts.items()) if k != "port"},
        "sources": {k: _cap(res.sources.get(k, "")) for k in
                    ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NNODES", "TF_CONFIG")},
    }


#: What every task must agree on with rank 0: (key of facts_of, how the report names it,
#: the Resolution source that explains it).
AGREE = (
    ("world_size", "WORLD_SIZE", "WORLD_SIZE"),
    ("master_addr", "MASTER_ADDR", "MASTER_ADDR"),
    ("master_port", "MASTER_PORT", "MASTER_PORT"),
    ("nnodes", "NNODES", "NNODES"),
    ("tf_digest", "TF_CONFIG workers", "TF_CONFIG"),
    ("launcher", "launcher", None),
    ("job", "job", None),
    ("step", "step", None),
    ("version", "slurmenv version", None),
    ("options", "options", None),
)


# -- messages -------------------------------------------------------------------------------
class ProtocolError(Exception):
    """A peer that does not speak the step check's protocol."""


def encode(payload: Mapping[str, Any]) -> bytes:
    data = MAGIC + json.dumps(payload, separators=(",", ":")).encode() + b"\n"
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    return data


def decode(buffer: bytes) -> dict[str, Any] | None:
    """The message in ``buffer``, None while incomplete; ProtocolError when it is not one."""
    if len(buffer) > MAX_MESSAGE:
        raise ProtocolError(f"more than {MAX_MESSAGE} bytes")
    head = buffer[:len(MAGIC)]
    if not MAGIC.startswith(head):
        raise ProtocolError("does not speak the slurmenv step check (wrong first line)")
    if len(buffer) <= len(MAGIC) or b"\n" not in buffer[len(MAGIC):]:
        return None
    line, _, rest = buffer[len(MAGIC):].partition(b"\n")
    if rest:
        raise ProtocolError("more than one message")
    try:
        payload = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(payload, dict):
        raise ProtocolError("not a JSON object")
    return payload


def valid_facts(payload: Mapping[str, Any], world_size: int) -> str | None:
    """Why ``payload`` is not a task's facts (None when it is)."""
    rank = payload.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 1 << 31:
        return "no rank in its message"
    return None


# -- rank 0 ---------------------------------------------------------------------------------
class Arrival:
    """One task that reached rank 0 and said who it is."""

    __slots__ = ("address", "facts", "seconds", "sock")

    def __init__(self, sock: socket.socket, address: str, facts: dict[str, Any],
                 seconds: float) -> None:
        self.sock = sock
        self.address = address
        self.facts = facts
        self.seconds = seconds


class Outcome:
    """What rank 0 found: the arrivals, the refused connections, whether the step is sound."""

    def __init__(self) -> None:
        self.arrivals: list[Arrival] = []
        self.refused: list[str] = []  # the first few reasons
        self.refused_count = 0
        self.seconds = 0.0
        self.listen_error: str | None = None
        self.ports: list[int] = []
        self.most_kept = 0  # the most connections held at once (at most WORLD_SIZE)


def _listen(port: int) -> socket.socket:
    """A listener on every interface (IPv6 and IPv4 where the node has both), SO_REUSEADDR."""
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("", port), family=socket.AF_INET6, backlog=128,
                                        dualstack_ipv6=True)
        except OSError:
            pass
    return socket.create_server(("", port), backlog=128)


def serve(
    ports: Sequence[int], world_size: int, timeout: float,
    handshake: float = HANDSHAKE_SECONDS,
) -> tuple[Outcome, list[socket.socket]]:
    """Rank 0: accept the other tasks on ``ports`` (the first must be bindable) until every
    rank 1..N-1 arrived, as many tasks as the step has arrived, or ``timeout`` seconds passed;
    a connection gets ``handshake`` seconds to say who it is. Returns the outcome and the
    listeners (closed by :func:`finish`)."""
    import selectors

    outcome = Outcome()
    start = time.monotonic()
    deadline = start + timeout
    listeners: list[socket.socket] = []
    for i, port in enumerate(ports):
        try:
            listeners.append(_listen(port))
            outcome.ports.append(port)
        except OSError as exc:
            if i == 0:
                why = os.strerror(exc.errno) if exc.errno else str(exc)
                outcome.listen_error = f"cannot listen on port {port}: {why}"
                outcome.seconds = time.monotonic() - start
                return outcome, listeners
    sel = selectors.DefaultSelector()
    for listener in listeners:
        listener.setblocking(False)
        sel.register(listener, selectors.EVENT_READ, None)
    pending: dict[socket.socket, tuple[bytearray, float, str]] = {}
    cap = max(world_size, 2)  # connections kept at once
    wanted = set(range(1, world_size))
    listening = True
    try:
        while True:
            now = time.monotonic()
            arrived = {a.facts["rank"] for a in outcome.arrivals}
            if wanted <= arrived or len(outcome.arrivals) >= world_size - 1 or now >= deadline:
                break
            kept = len(pending) + len(outcome.arrivals)
            if listening and kept >= cap:
                for listener in listeners:
                    sel.unregister(listener)
                listening = False
            elif not listening and kept < cap:
                for listener in listeners:
                    sel.register(listener, selectors.EVENT_READ, None)
                listening = True
            wake = min([deadline, *(d for _, d, _ in pending.values())])
            for key, _ in sel.select(max(0.0, wake - now)):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if key.data is None:  # a listener
                    try:
                        conn, peer = sock.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    pending[conn] = (bytearray(), time.monotonic() + handshake,
                                     _peer_text(peer))
                    sel.register(conn, selectors.EVENT_READ, "conn")
                    outcome.most_kept = max(outcome.most_kept,
                                            len(pending) + len(outcome.arrivals))
                    continue
                buffer, _, peer = pending[sock]
                try:
                    chunk = sock.recv(MAX_MESSAGE + 1 - len(buffer))
                except OSError as exc:
                    chunk, why = b"", f"error {exc.strerror or exc}"
                else:
                    why = "closed before saying who it is"
                problem: str | None = why if not chunk else None
                payload = None
                if chunk:
                    buffer += chunk
                    try:
                        payload = decode(bytes(buffer))
                    except ProtocolError as exc:
                        problem = str(exc)
                    if payload is not None:
                        problem = valid_facts(payload, world_size)
                if problem is not None:
                    _refuse(outcome, sel, pending, sock, peer, problem)
                elif payload is not None:
                    sel.unregister(sock)
                    del pending[sock]
                    outcome.arrivals.append(Arrival(sock, peer, payload,
                                                    time.monotonic() - start))
            now = time.monotonic()
            for sock, (_, until, peer) in list(pending.items()):
                if now >= until:
                    _refuse(outcome, sel, pending, sock, peer,
                            f"said nothing valid within {handshake:g} s")
    finally:
        for sock in list(pending):
            sock.close()
        sel.close()
    outcome.seconds = time.monotonic() - start
    return outcome, listeners


def _peer_text(peer: Any) -> str:
    try:
        host = str(peer[0])
        return host.removeprefix("::ffff:")
    except (IndexError, TypeError):
        return "?"


def _refuse(outcome: Outcome, sel: Any, pending: dict[socket.socket, Any],
            sock: socket.socket, peer: str, why: str) -> None:
    outcome.refused_count += 1
    if len(outcome.refused) < 5:
        outcome.refused.append(f"{peer}: {why}")
    sel.unregister(sock)
    del pending[sock]
    sock.close()


def finish(arrivals: Sequence[Arrival], listeners: Sequence[socket.socket], ok: bool,
           lines: Mapping[int, str]) -> None:
    """Answer every task with its verdict, wait briefly for each to close its end (so the
    port has no TIME_WAIT left on rank 0's side), then close everything."""
    import selectors

    for listener in listeners:
        listener.close()  # no new connection from now on: the port is being freed
    sel = selectors.DefaultSelector()
    for arrival in arrivals:
        rank = arrival.facts.get("rank")
        line = lines.get(rank, "") if isinstance(rank, int) else ""
        try:
            arrival.sock.setblocking(True)
            arrival.sock.settimeout(2.0)
            arrival.sock.sendall(encode({"ok": ok, "line": line[:2000]}))
            arrival.sock.shutdown(socket.SHUT_WR)
            arrival.sock.setblocking(False)
            sel.register(arrival.sock, selectors.EVENT_READ)
        except OSError:
            arrival.sock.close()
    deadline = time.monotonic() + 2.0
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(max(0.0, deadline - time.monotonic())):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                sel.unregister(sock)
                sock.close()
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    sel.close()


# -- the report -----------------------------------------------------------------------------
def _ranks_text(ranks: Sequence[int]) -> str:
    """``1-3,7``: sorted ranks as ranges."""
    out: list[str] = []
    ordered = sorted(set(ranks))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _value_text(key: str, value: Any) -> str:
    if key == "options" and isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    return "?" if value is None else str(value)


def report(res: Resolution, own: Mapping[str, Any], outcome: Outcome) -> tuple[bool, list[str]]:
    """Rank 0's verdict and report lines (summary first, then only the problems)."""
    world = res.world_size
    where = f"{res.master_addr}:{res.master_port}"
    if outcome.listen_error is not None:
        return False, [
            (f"slurmenv step check: rank 0 on {own['node']} {outcome.listen_error}: something "
             "else holds it on this node (a leftover of an earlier step?); training would fail "
             "there too"),
            ("  fix: find it with `slurmenv doctor` (ports check) on this node, or give the "
             "step another port (srun --resv-ports, SLURMENV_PORT)"),
        ]
    try:
        hosts: Sequence[str] | None = res.hosts
        node_of: Sequence[int] | None = res.node_of
    except SlurmEnvError:
        hosts = node_of = None

    def expected(rank: int) -> str | None:
        if hosts is None or node_of is None or not 0 <= rank < len(node_of):
            return None
        return hosts[node_of[rank]]

    by_rank: dict[int, list[Arrival]] = {}
    for arrival in outcome.arrivals:
        by_rank.setdefault(int(arrival.facts["rank"]), []).append(arrival)
    problems: list[str] = []
    bad: set[int] = set()
    # ranks claimed twice (rank 0 is this task)
    for rank in sorted(by_rank):
        claims = by_rank[rank]
        count = len(claims) + (rank == 0)
        if count > 1:
            bad.add(rank)
            holders = [f"{a.facts.get('node', '?')} ({_from_text(a)})" for a in claims]
            if rank == 0:
                holders.insert(0, f"{own['node']} (rank 0 itself)")
            problems.append(f"rank {rank} started {count} times: by " + ", ".join(holders)
                            + _expected_text(expected(rank)))
    # ranks that are not ranks of this step (a task of a larger world, a forged message)
    outside = sorted(r for r in by_rank if r >= world)
    if outside:
        bad.update(outside)
        problems.append(f"{_plural(len(outside), 'task')} claimed rank "
                        f"{_ranks_text(outside[:50])}, not a rank of this step of {world}")
    # ranks that never arrived
    missing = [r for r in range(1, world) if r not in by_rank]
    if missing:
        bad.update(missing)
        by_node: dict[str | None, list[int]] = {}
        for rank in missing:
            by_node.setdefault(expected(rank), []).append(rank)
        for node, ranks in by_node.items():
            on = f" (expected on {node})" if node else ""
            problems.append(f"{_plural(len(ranks), 'rank')} {_ranks_text(ranks)}{on} never "
                            f"connected to {where}")
    # each arrival against rank 0's own values; the step only within a Slurm step (under
    # mpirun in a batch script rank 0 runs in the batch step, the others in orted's step)
    slurm_step = str(own.get("launcher", "")).startswith("slurm")
    disagree: dict[tuple[str, str, str], list[tuple[int, str, str]]] = {}
    for rank, claims in sorted(by_rank.items()):
        for arrival in claims:
            facts = arrival.facts
            node = str(facts.get("node", "?"))
            exp = expected(rank)
            if exp is not None and node != exp and len(claims) == 1:
                bad.add(rank)
                problems.append(f"rank {rank} runs on {node}, but the step's layout puts it "
                                f"on {exp}")
            for key, label, source in AGREE:
                if key not in facts or (key == "step" and not slurm_step):
                    continue
                mine, theirs = own.get(key), facts.get(key)
                if mine == theirs or (key == "tf_digest" and
                                      own.get("master_port") != facts.get("master_port")):
                    continue  # TensorFlow's ports follow MASTER_PORT: said once
                bad.add(rank)
                sources = facts.get("sources")
                src = sources.get(source, "") if source and isinstance(sources, dict) else ""
                if isinstance(mine, dict) and isinstance(theirs, dict):  # the options:
                    names = sorted({*mine, *theirs}, key=str)  # only those that differ
                    mine = {k: mine.get(k) for k in names if mine.get(k) != theirs.get(k)}
                    theirs = {k: theirs.get(k) for k in mine}
                disagree.setdefault(
                    (label, _value_text(key, theirs), _value_text(key, mine)), []
                ).append((rank, node, str(src)))
    labels = {label: (key, source) for key, label, source in AGREE}
    for (label, value, mine), who in disagree.items():
        _, source = labels[label]
        my_src = own["sources"].get(source, "") if source else ""
        nodes = sorted({entry[1] for entry in who})
        src = who[0][2]
        problems.append(
            f"{_plural(len(who), 'rank')} {_ranks_text([entry[0] for entry in who])} on "
            f"{', '.join(nodes)} disagree on {label}: {value}"
            + (f" ({src})" if src else "")
            + f"; rank 0 has {mine}" + (f" ({my_src})" if my_src else ""))
    reached = len({r for r in by_rank if r != 0}) + 1
    ok = not problems
    head = (f"slurmenv step check: {reached} of {world} ranks reached {where} in "
            f"{outcome.seconds:.1f} s")
    if ok:
        head += ", all agree"
    else:
        head += f"; {_plural(len(bad), 'rank')} with problems, the step is not sound"
    lines = [head]
    if len(problems) > MAX_SHOWN:
        problems = [*problems[:MAX_SHOWN], f"... and {len(problems) - MAX_SHOWN} more"]
    lines += [f"  {p}" for p in problems]
    if outcome.refused_count:
        lines.append(f"  refused {_plural(outcome.refused_count, 'connection')} that did not "
                     "speak the step check: " + "; ".join(outcome.refused))
    return ok, [printable(line) for line in lines]


def _from_text(arrival: Arrival) -> str:
    """The address a task came from: as rank 0 saw it, and as the task said if it differs
    (a NAT, a proxy in between)."""
    via = arrival.facts.get("via")
    if not isinstance(via, str) or via == arrival.address:
        return arrival.address
    return f"{via[:64]}, seen as {arrival.address}"


def _expected_text(node: str | None) -> str:
    return f" (the step's layout puts it on {node})" if node else ""


# -- a task other than rank 0 ---------------------------------------------------------------
def route_text(addr: str, port: int) -> str:
    """``eth0 10.0.0.3``: the interface and address this node would use to reach ``addr``
    (the kernel's route, found by connecting a UDP socket: no packet is sent)."""
    try:
        info = socket.getaddrinfo(addr, port, type=socket.SOCK_DGRAM)[0]
        probe = socket.socket(info[0], socket.SOCK_DGRAM)
        try:
            probe.connect(info[4])
            local = _peer_text(probe.getsockname())
        finally:
            probe.close()
    except OSError as exc:
        return f"no route ({exc.strerror or exc})"
    return f"{_interface_of(local)} {local}".strip()


def _interface_of(address: str) -> str:
    try:
        import psutil
    except ImportError:  # pragma: no cover - a dependency
        return ""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == address for a in addrs):
            return str(name)
    return ""


def join(
    addr: str, ports: Sequence[int], facts: Mapping[str, Any], timeout: float
) -> tuple[bool, str]:
    """A task other than rank 0: reach rank 0 (its port, then the others of ``ports``), send
    ``facts``, wait for the verdict. Returns (ok, the line to print)."""
    start = time.monotonic()
    deadline = start + timeout
    errors: dict[int, str] = {}
    delay = 0.05
    attempt = 0
    while time.monotonic() < deadline:
        port = ports[attempt % len(ports)]
        attempt += 1
        left = deadline - time.monotonic()
        try:
            sock = socket.create_connection((addr, port), timeout=max(0.1, min(2.0, left)))
        except OSError as exc:
            errors[port] = _why(exc)
            if attempt % len(ports) == 0:
                time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
                delay = min(delay * 2, 0.25)
            continue
        try:
            # the address this task left from, as rank 0 should see it (a NAT would not)
            message = encode({**facts, "via": _peer_text(sock.getsockname())})
            return _talk(sock, message, start + timeout + VERDICT_GRACE, addr, port)
        finally:
            sock.close()
    tried = "; ".join(f"{addr}:{p}: {why}" for p, why in errors.items()) or "no attempt"
    return False, (f"rank {facts['rank']} on {facts['node']}: could not reach rank 0 at "
                   f"{addr}:{ports[0]} within {timeout:g} s, from "
                   f"{route_text(addr, ports[0])} ({tried})")


def _why(exc: OSError) -> str:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out (packets dropped on the way?)"
    if isinstance(exc, socket.gaierror):
        return f"the name does not resolve ({exc.strerror})"
    return str(exc.strerror or exc)


def _talk(sock: socket.socket, message: bytes, until: float, addr: str,
          port: int) -> tuple[bool, str]:
    held = (f"{addr}:{port} answers but not as a slurmenv step check: another program holds "
            "the port")
    buffer = b""
    try:
        sock.settimeout(max(0.1, until - time.monotonic()))
        sock.sendall(message)
        while True:
            sock.settimeout(max(0.01, until - time.monotonic()))
            chunk = sock.recv(MAX_MESSAGE + 1 - len(buffer))
            if not chunk:
                return False, (f"rank 0 at {addr}:{port} closed the connection without a "
                               "verdict (it refused this task's message, or it ended)"
                               if not buffer else held)
            buffer += chunk
            reply = decode(buffer)
            if reply is not None:
                break
    except ProtocolError:
        return False, held
    except OSError as exc:
        return False, f"no verdict from rank 0 at {addr}:{port}: {_why(exc)}"
    line = reply.get("line")
    return reply.get("ok") is True, printable(str(line)[:2000]) if line else "?"


# -- the whole check ------------------------------------------------------------------------
def baseline_port(environ: Mapping[str, str], given: Mapping[str, Any]) -> int | None:
    """The port the step would use without a port override (``SLURMENV_PORT``, ``--port``,
    an inherited ``MASTER_PORT``), None when that does not resolve."""
    overrides = ("SLURMENV_PORT", "MASTER_PORT")
    if given.get("port") is None and not any(environ.get(name) for name in overrides):
        return None  # no override here: the step's port is this task's (no second resolve)
    env = {k: v for k, v in environ.items() if k not in overrides}
    opts = {k: v for k, v in given.items() if k != "port"}
    try:
        return resolve(env, ephemeral_range=None, rivals=None, **opts).master_port
    except (SlurmEnvError, ValueError):
        return None


def run(
    res: Resolution, environ: Mapping[str, str], given: Mapping[str, Any], timeout: float
) -> tuple[bool, list[str]]:
    """The step check in this task: (sound, the lines to print). Rank 0's are the report;
    any other task's is its own verdict, one line."""
    if res.launcher == "torchrun":
        return False, [("slurmenv step check: not inside torchrun's workers (its agent "
                        "already holds MASTER_PORT); run it in the step before torchrun: "
                        "srun slurmenv doctor --step")]
    try:
        opts = options.from_environ(environ, **given)._asdict()
    except SlurmEnvError:
        opts = dict(given)
    own = facts_of(res, opts)
    ports = [res.master_port]
    other = baseline_port(environ, given)
    if other is not None and other != res.master_port:
        ports.append(other)
    where = f"{res.master_addr}:{res.master_port}"
    if res.world_size <= 1:
        return True, [f"slurmenv step check: 1 of 1 rank ({where}): nothing to check"]
    if res.rank != 0:
        ok, line = join(res.master_addr, ports, own, timeout)
        return ok, [f"slurmenv step check: {line}"
                    if not line.startswith("slurmenv") else line]
    outcome, listeners = serve(ports, res.world_size, timeout)
    ok, lines = report(res, own, outcome)
    verdicts: dict[int, str] = {}
    short = lines[0].replace("slurmenv step check: ", "").split(";")[0]
    for arrival in outcome.arrivals:
        rank = int(arrival.facts["rank"])
        verdicts[rank] = (f"slurmenv step check: rank {rank}: " + (
            f"ok ({short})" if ok else
            f"the step is not sound ({short}; rank 0's report on {own['node']} says why)"))
    finish(outcome.arrivals, listeners, ok, verdicts)
    return ok, lines


def main_for(res: Resolution, given: Mapping[str, Any], timeout: float,
             stream: Any = None) -> int:
    """Run the check in this process (``os.environ``), print its lines on ``stream`` (default
    stdout), return the exit status: 0 when the step is sound, else 1."""
    import sys

    ok, lines = run(res, os.environ, dict(given), timeout)
    out = sys.stdout if stream is None else stream
    try:
        out.write("\n".join(lines) + "\n")
        out.flush()
    except (OSError, ValueError, AttributeError):
        pass
    return 0 if ok else 1
