"""Rank 0 of the step check: gather every task, decide, and make the decision everyone's
(docs/step-check.md). One listener on the step's own port, one event loop (``selectors``),
three phases: **gather** until every rank 1..N-1 said hello or the timeout; **verdict** to
every task (not sound: no task starts; sound: each acknowledges within :data:`ACK_SECONDS`,
else, or when a task of the step arrives now, "abort"); **decision**, "go" or "abort" to every
task, then linger until each closed its end or :data:`LINGER_SECONDS` passed, answering a task
back after a broken link with the decision and a newcomer with "late". Before a go the
listener closes: the port is the training's from then on. Rank 0 starts only on "go"; the only
split left is a task whose link breaks after its acknowledgement for the whole linger.
"""

from __future__ import annotations

import errno
import os
import resource
import selectors
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from .protocol import (
    MAX_MESSAGE,
    ProtocolError,
    encode,
    hello_facts,
    identity,
    message,
    one_line,
    problems_of,
    split,
)

HANDSHAKE_SECONDS = 5.0  # a connection must have said who it is within this
ACK_SECONDS = 10.0  # every task acknowledges a sound verdict within this
SETTLE_SECONDS = 0.1  # after the last acknowledgement: links that broke show before the go
LINGER_SECONDS = 5.0  # rank 0 waits this long at most for every task to confirm the decision
RESERVE_FDS = 64  # descriptors kept for everything but the tasks' connections
#: Places for connections that have not said who they are, beyond one per task: that many
#: silent or slow strangers (a port scanner, a health check, a leftover client) never keep a
#: task of the step waiting in the kernel's backlog.
SPARE_PLACES = 16


class Arrival:
    """One task of this step that reached rank 0 and said who it is."""

    __slots__ = ("acked", "address", "confirmed", "facts", "lost", "problems", "seconds",
                 "sock", "task", "told")

    def __init__(self, sock: socket.socket | None, address: str, facts: dict[str, Any],
                 seconds: float, task: str = "") -> None:
        self.sock = sock
        self.address = address
        self.facts = facts
        self.seconds = seconds
        self.task = task
        self.problems: list[str] = problems_of(facts)
        self.acked = False
        self.lost = False  # its link broke and it has not come back
        self.told = False  # the decision was written to its current connection
        self.confirmed = False  # it closed its end after the decision


class Outcome:
    """What rank 0 found and how the decision went."""

    def __init__(self) -> None:
        self.arrivals: list[Arrival] = []
        self.refused: list[str] = []  # the first few reasons
        self.refused_count = 0
        self.foreign: list[str] = []  # tasks of another step (never counted)
        self.late: list[Arrival] = []  # tasks of this step after the verdict
        self.seconds = 0.0
        self.listen_error: str | None = None
        self.port = 0
        self.most_kept = 0  # the most connections held at once
        #: The most connections that had not said who they were while rank 0 held all it
        #: may (tasks may have waited behind them in the backlog): 0 when it never did.
        self.crowded = 0
        self.fd_limit: int | None = None  # the open-file limit, when accept() met it
        self.verdict: bool | None = None  # phase 1: sound or not
        self.decision: str | None = None  # "go" or "abort"
        self.abort_why: list[str] = []


class _Conn:
    __slots__ = ("arrival", "buf", "peer", "sock", "until")

    def __init__(self, sock: socket.socket, peer: str, until: float) -> None:
        self.sock = sock
        self.peer = peer
        self.until = until
        self.buf = b""
        self.arrival: Arrival | None = None


def peer_text(peer: Any) -> str:
    try:
        return str(peer[0]).removeprefix("::ffff:")
    except (IndexError, TypeError):
        return "?"


def raise_fd_limit(wanted: int) -> tuple[int, int] | None:
    """Raise the soft open-file limit towards ``wanted`` (at most the hard limit): the old
    (soft, hard) to restore, None when nothing changed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return None
    new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if new <= soft:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (ValueError, OSError):
        return None
    return soft, hard


def restore_fd_limit(old: tuple[int, int] | None) -> None:
    try:
        if old is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, old)
    except (ValueError, OSError):
        pass


def listen(port: int, backlog: int) -> socket.socket:
    """A listener on every interface (IPv6 and IPv4 where the node has both), SO_REUSEADDR."""
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("", port), family=socket.AF_INET6, backlog=backlog,
                                        dualstack_ipv6=True)
        except OSError:
            pass
    return socket.create_server(("", port), backlog=backlog)


class Rank0:
    """Rank 0's side of one step check (see the module's docstring)."""

    def __init__(self, own: Mapping[str, Any], timeout: float,
                 handshake: float = HANDSHAKE_SECONDS, slurm_step: bool = True) -> None:
        self.own = dict(own)
        self.ident = identity(own)
        self.world = int(own["world_size"])
        self.timeout = timeout
        self.handshake = handshake
        self.slurm_step = slurm_step  # compare the step id (not under mpirun in a batch script)
        self.outcome = Outcome()
        self.sel = selectors.DefaultSelector()
        self.listener: socket.socket | None = None
        self.accepting = False
        self.paused = False  # at the open-file limit: accept again once a descriptor is free
        self.cap = max(self.world, 2) + SPARE_PLACES  # connections held at once, at most
        self.conns: dict[socket.socket, _Conn] = {}
        self.pending: dict[socket.socket, _Conn] = {}  # not yet said who they are, in order
        self.seen: set[int] = set()  # ranks 1..N-1 that said hello
        self.acked = 0  # arrivals that acknowledged the verdict
        self.confirmed = 0  # arrivals that closed after the decision
        self.by_task: dict[str, Arrival] = {}
        self.phase = "gather"
        self.start = time.monotonic()
        self.lines: dict[int, str] = {}  # the verdict's line per rank
        self.final: dict[int, str] = {}  # the decision's line per rank

    # -- the loop ----------------------------------------------------------------------
    def open(self, port: int) -> bool:
        self.outcome.port = port
        try:
            self.listener = listen(port, min(max(self.world, 128), 65535))
        except OSError as exc:
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            self.outcome.listen_error = f"cannot listen on port {port}: {why}"
            return False
        self.listener.setblocking(False)
        self._accept(True)
        return True

    def _accept(self, on: bool) -> None:
        if self.listener is None or on == self.accepting:
            return
        if on:
            self.sel.register(self.listener, selectors.EVENT_READ, None)
        else:
            self.sel.unregister(self.listener)
        self.accepting = on

    def pump(self, until: float, done: Callable[[], bool]) -> None:
        """Serve events until ``done()`` or ``until`` (monotonic)."""
        while not done():
            now = time.monotonic()
            if now >= until:
                return
            if not self.paused:
                self._accept(len(self.conns) < self.cap)
            first = next(iter(self.pending.values()), None)  # accepted in order: the earliest
            wake = min(until, first.until) if first is not None and self._expiring() else until
            for key, _ in self.sel.select(max(0.0, wake - now)):
                if key.data is None:
                    self._on_listener()
                else:
                    self._on_readable(key.data)
            if len(self.conns) >= self.cap and self.pending:  # full, strangers among them
                self.outcome.crowded = max(self.outcome.crowded, len(self.pending))
            self._expire(time.monotonic())

    def _expiring(self) -> bool:
        """Whether a connection silent past its handshake is dropped now: when its place is
        needed (rank 0 holds as many as the step has tasks and :data:`SPARE_PLACES`), or
        after the gathering. A task of a loaded node may take seconds to write its hello once
        the kernel has accepted its connection: it is not dropped while there is room."""
        return self.phase != "gather" or len(self.conns) >= self.cap

    def _expire(self, now: float, force: bool = False) -> None:
        while self.pending and (force or self._expiring()):
            conn = next(iter(self.pending.values()))
            if now < conn.until:
                break
            self._refuse(conn, f"said nothing valid within {self.handshake:g} s")

    def _on_listener(self) -> None:
        assert self.listener is not None
        for _ in range(min(256, self.cap - len(self.conns))):  # never over the cap
            try:
                sock, peer = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    # the open-file limit: stop accepting (no spin on a readable listener)
                    # until a descriptor is freed; those left wait in the kernel's backlog
                    self.outcome.fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
                    self.paused = True
                    self._accept(False)
                return
            sock.setblocking(False)
            conn = _Conn(sock, peer_text(peer), time.monotonic() + self.handshake)
            self.conns[sock] = conn
            self.pending[sock] = conn
            self.sel.register(sock, selectors.EVENT_READ, conn)
            self.outcome.most_kept = max(self.outcome.most_kept, len(self.conns))

    def _on_readable(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(MAX_MESSAGE + 1)
        except OSError as exc:
            self._gone(conn, f"error {exc.strerror or exc}")
            return
        if not chunk:
            self._gone(conn, "closed before saying who it is")
            return
        conn.buf += chunk
        while conn.sock in self.conns:
            try:
                payload, conn.buf = split(conn.buf)
            except ProtocolError as exc:
                self._gone(conn, str(exc))
                return
            if payload is None:
                return
            if conn.arrival is None and conn.buf:
                self._gone(conn, "more than one message")
                return
            self._on_message(conn, payload)

    def _close(self, conn: _Conn) -> None:
        self.pending.pop(conn.sock, None)
        if self.conns.pop(conn.sock, None) is not None:
            self.sel.unregister(conn.sock)
        conn.sock.close()
        if self.paused:
            self.paused = False  # a descriptor is free again: accept once more

    def _gone(self, conn: _Conn, why: str) -> None:
        arrival = conn.arrival
        if arrival is None:
            self._refuse(conn, why)
            return
        if arrival.sock is conn.sock:
            arrival.sock = None
            if arrival.told:
                self._confirm(arrival)  # it had the decision, then closed: all it needs
            else:
                arrival.lost = True
        self._close(conn)

    def _refuse(self, conn: _Conn, why: str) -> None:
        self.outcome.refused_count += 1
        if len(self.outcome.refused) < 5:
            self.outcome.refused.append(f"{conn.peer}: {one_line(why)}")
        self._close(conn)

    def _send(self, conn: _Conn, payload: Mapping[str, Any]) -> bool:
        data = encode(payload)
        try:
            sent = conn.sock.send(data)
        except OSError:
            sent = -1
        if sent != len(data):  # a message fits any socket buffer: a short write is a broken link
            self._gone(conn, "its link broke")
            return False
        return True

    def _tell(self, conn: _Conn, kind: str, line: str) -> None:
        """Answer a connection that is not counted, then close it."""
        self._send(conn, message(kind, self.ident, line=line))
        if conn.sock in self.conns:
            self._close(conn)

    # -- messages ----------------------------------------------------------------------
    def _another_step(self, facts: Mapping[str, Any]) -> bool:
        return facts.get("job") != self.own["job"] or (
            self.slurm_step and facts.get("step") != self.own["step"])

    def _on_message(self, conn: _Conn, payload: dict[str, Any]) -> None:
        kind = payload.get("kind")
        task = payload.get("task")
        known = self.by_task.get(task) if isinstance(task, str) else None
        if conn.arrival is not None:
            if kind == "ack" and self.phase != "gather":
                self._ack(conn.arrival)
            else:
                self._gone(conn, f"a {one_line(str(kind)[:20])} message out of turn")
            return
        if known is not None and kind in ("hello", "ack"):
            self._reattach(conn, known, kind == "ack")
            return
        facts, why = hello_facts(payload)
        if facts is None:
            self._refuse(conn, why or "?")
            return
        if self._another_step(facts):
            self._foreign(conn, facts)
            return
        arrival = Arrival(conn.sock, conn.peer, facts, time.monotonic() - self.start, str(task))
        if self.phase != "gather":
            self.outcome.late.append(arrival)
            if self.phase == "acks":  # a task of this step after the verdict: not all or none
                self.outcome.abort_why.append(
                    f"rank {facts['rank']} on {one_line(facts.get('node'))} arrived after the "
                    "verdict")
            self._tell(conn, "late", (
                f"rank {facts['rank']} on {one_line(facts.get('node'))}: arrived "
                f"{arrival.seconds:.1f} s after rank 0 started, after its verdict on the "
                f"{self.world} ranks it had: this task does not start (a rank started twice, "
                "or a task started too late)"))
            return
        conn.arrival = arrival
        self.pending.pop(conn.sock, None)
        self.by_task[arrival.task] = arrival
        self.outcome.arrivals.append(arrival)
        if 0 < facts["rank"] < self.world:
            self.seen.add(facts["rank"])

    def _foreign(self, conn: _Conn, facts: Mapping[str, Any]) -> None:
        theirs = f"job {one_line(facts.get('job'))} step {one_line(facts.get('step'))}"
        self.outcome.foreign.append(
            f"rank {facts['rank']} of {one_line(facts.get('world_size'))} of {theirs} on "
            f"{one_line(facts.get('node'))} ({conn.peer})")
        self._tell(conn, "other-step", (
            f"{self.own['master_addr']}:{self.outcome.port} is held by rank 0 of job "
            f"{one_line(self.own['job'])} step {one_line(self.own['step'])}, not of {theirs}: "
            "two steps share this address and port"))

    def _reattach(self, conn: _Conn, arrival: Arrival, ack: bool) -> None:
        """A task back after its link broke (same nonce): its new connection replaces the
        old, and it learns what it missed."""
        if arrival.sock is not None and arrival.sock in self.conns:
            self._close(self.conns[arrival.sock])
        conn.arrival = arrival
        self.pending.pop(conn.sock, None)
        arrival.sock, arrival.lost, arrival.told = conn.sock, False, False
        rank = int(arrival.facts["rank"])
        if ack and self.phase != "gather":
            self._ack(arrival)
        if self.phase == "acks" and not ack:
            self._send(conn, message("verdict", self.ident, ok=True, task=arrival.task,
                                     line=self.lines.get(rank, "")))
        elif self.phase == "decided":
            self._decide_one(arrival)

    def _ack(self, arrival: Arrival) -> None:
        if not arrival.acked:
            arrival.acked = True
            self.acked += 1

    def _confirm(self, arrival: Arrival) -> None:
        if not arrival.confirmed:
            arrival.confirmed = True
            self.confirmed += 1

    # -- the phases --------------------------------------------------------------------
    def gather(self) -> None:
        deadline = self.start + self.timeout

        def done() -> bool:
            return len(self.seen) == self.world - 1 or \
                len(self.outcome.arrivals) >= self.world - 1

        self.pump(deadline, done)
        self._expire(time.monotonic(), force=True)  # silent so far: counted in the report
        self.outcome.seconds = time.monotonic() - self.start

    def verdict(self, ok: bool, lines: Mapping[int, str]) -> None:
        """Phase 1's end: the verdict to every task; when sound, wait for every ack."""
        self.outcome.verdict = ok
        self.lines = dict(lines)
        self.phase = "acks" if ok else "decided"
        if not ok:
            self.outcome.decision = "abort"
            self.final = self.lines
        for arrival in list(self.outcome.arrivals):
            conn = self.conns.get(arrival.sock) if arrival.sock is not None else None
            if conn is None:
                continue
            if ok:
                self._send(conn, message("verdict", self.ident, ok=True, task=arrival.task,
                                         line=self.lines.get(int(arrival.facts["rank"]), "")))
            else:
                self._decide_one(arrival)
        if not ok:
            return
        # every task acknowledged, and none whose link broke since is still away: the "go"
        # goes out on live links only (a listener closed before the go cannot take it back)
        deadline = time.monotonic() + ACK_SECONDS

        def lost() -> bool:
            return any(a.lost for a in self.outcome.arrivals)

        def all_in() -> bool:
            return bool(self.outcome.abort_why) or (
                self.acked == len(self.outcome.arrivals) and not lost())

        self.pump(deadline, all_in)
        if all_in() and not self.outcome.abort_why:
            # settle: a link that broke right after its acknowledgement shows now, before any go
            self.pump(min(deadline, time.monotonic() + SETTLE_SECONDS), lost)
            self.pump(deadline, all_in)
        missing = [a for a in self.outcome.arrivals if not a.acked or a.lost]
        if missing and not self.outcome.abort_why:
            self.outcome.abort_why.append(
                f"{len(missing)} rank(s) did not acknowledge the verdict, or lost their link "
                f"after it, within {ACK_SECONDS:g} s (a link broke after the gathering)")

    def decide(self, go_lines: Mapping[int, str], abort_lines: Mapping[int, str]) -> None:
        """Phase 2 (after a sound verdict): go when every task acknowledged it, else abort."""
        go = not self.outcome.abort_why
        self.outcome.decision = "go" if go else "abort"
        if go:
            self._stop_listening()  # the port is the training's: no connection but the tasks'
        self.final = dict(go_lines if go else abort_lines)
        self.phase = "decided"
        for arrival in list(self.outcome.arrivals):
            self._decide_one(arrival)

    def _decide_one(self, arrival: Arrival) -> None:
        conn = self.conns.get(arrival.sock) if arrival.sock is not None else None
        if conn is None:
            return
        line = self.final.get(int(arrival.facts["rank"]), "")
        if self.outcome.decision == "go" or self.outcome.verdict:  # go, or abort after a sound one
            payload = message(str(self.outcome.decision), self.ident, line=line,
                              task=arrival.task)
        else:
            payload = message("verdict", self.ident, ok=False, line=line, task=arrival.task)
        if self._send(conn, payload):
            arrival.told = True

    def linger(self) -> None:
        """Until every task closed its end after the decision (or LINGER_SECONDS): the
        tasks close first, so the port keeps no TIME_WAIT on rank 0's side."""
        self.pump(time.monotonic() + LINGER_SECONDS,
                  lambda: self.confirmed == len(self.outcome.arrivals))

    def _stop_listening(self) -> None:
        if self.listener is not None:
            self._accept(False)
            self.listener.close()
            self.listener = None

    def close(self) -> None:
        self._stop_listening()
        for conn in list(self.pending.values()):  # strangers still silent: counted, named
            self._refuse(conn, "said nothing valid before the check ended")
        for conn in list(self.conns.values()):
            self._close(conn)
        self.sel.close()
