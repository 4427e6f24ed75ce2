"""A task other than rank 0: reach rank 0, say hello, learn the verdict, acknowledge it, and
start only on rank 0's "go". It tries to reach rank 0 for the timeout from its own start, then
waits for the verdict for the timeout from *that* moment (rank 0's deadline is earlier: a task
early or late by up to the timeout is neither cut off nor left waiting), then for the decision
(ACK_SECONDS + LINGER_SECONDS). A broken link is tried again with the same nonce (rank 0 says
what it missed); a task that cannot learn the decision does not start.
"""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .protocol import ID_FIELDS, MAX_MESSAGE, ProtocolError, encode, message, one_line, split
from .rank0 import ACK_SECONDS, LINGER_SECONDS, peer_text

#: A task waits this long past the timeout for rank 0's verdict, from when it reached rank 0.
VERDICT_GRACE = 10.0


def route_text(addr: str, port: int) -> str:
    """``eth0 10.0.0.3``: the interface and address this node would use to reach ``addr``
    (the kernel's route, found by connecting a UDP socket: no packet is sent)."""
    try:
        info = socket.getaddrinfo(addr, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(info[0], socket.SOCK_DGRAM) as probe:
            probe.connect(info[4])
            local = peer_text(probe.getsockname())
    except OSError as exc:
        return f"no route ({exc.strerror or exc})"
    return f"{_interface_of(local)} {local}".strip()


def _interface_of(address: str) -> str:
    from ...dump.probe import interfaces

    return next((name for name, addrs in interfaces().items() if address in addrs), "")


def why(exc: OSError) -> str:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out (packets dropped on the way?)"
    if isinstance(exc, socket.gaierror):
        return f"the name does not resolve ({exc.strerror})"
    return str(exc.strerror or exc)


class _Broken(Exception):
    """The link to rank 0 broke (try again while the phase's deadline allows)."""


class Task:
    def __init__(self, addr: str, ports: Sequence[int], facts: Mapping[str, Any],
                 timeout: float) -> None:
        self.addr, self.ports, self.timeout = addr, list(ports), timeout
        self.facts = dict(facts)
        self.ident = {k: facts.get(k) for k in ID_FIELDS}
        self.nonce = secrets.token_hex(16)
        self.start = time.monotonic()
        self.errors: dict[int, str] = {}
        self.port = self.ports[0]
        self.phase = "hello"  # then "acked"
        self.until = self.start + timeout  # to reach rank 0 at all
        self.reached: float | None = None
        self.who = f"rank {facts['rank']} on {one_line(facts.get('node'))}"
        # rank 0 compares the step in a Slurm step only (mpirun in a batch script: another)
        self.compares_step = str(facts.get("launcher", "")).startswith("slurm")

    def _connect(self) -> socket.socket | None:
        """A connection to rank 0 (its port first, then the others) before ``until``."""
        delay, attempt = 0.05, 0
        ports = [self.port] if self.reached is not None else self.ports
        while time.monotonic() < self.until:
            port = ports[attempt % len(ports)]
            attempt += 1
            left = self.until - time.monotonic()
            try:
                sock = socket.create_connection((self.addr, port),
                                                timeout=max(0.1, min(2.0, left)))
            except OSError as exc:
                self.errors[port] = why(exc)
                if attempt % len(ports) == 0:
                    time.sleep(max(0.0, min(delay, self.until - time.monotonic())))
                    delay = min(delay * 2, 0.25)
                continue
            self.port = port
            return sock
        return None

    def run(self) -> tuple[bool, str]:
        while True:
            sock = self._connect()
            if sock is None:
                return False, self._unreached()
            try:
                return self._session(sock)
            except _Broken as exc:
                self.errors[self.port] = str(exc)
                if time.monotonic() >= self.until:
                    return False, self._unreached()
            finally:
                sock.close()

    def _unreached(self) -> str:
        tried = "; ".join(f"{self.addr}:{p}: {w}" for p, w in self.errors.items())
        if self.reached is None:
            refused = bool(self.errors) and all(
                w == "Connection refused" for w in self.errors.values())
            return (f"{self.who}: could not reach rank 0 at {self.addr}:{self.ports[0]} within "
                    f"{self.timeout:g} s, from {route_text(self.addr, self.ports[0])} "
                    f"({tried or 'no attempt'})" + (
                        "; nothing listens there: rank 0 did not start its check, or had "
                        "ended it (this task too late?)" if refused else ""))
        what = "the verdict" if self.phase == "hello" else "the decision (go or abort)"
        return (f"{self.who}: lost its link to rank 0 at {self.addr}:{self.port} before "
                f"{what} and could not get it back: it does not start ({tried})")

    def _session(self, sock: socket.socket) -> tuple[bool, str]:
        if self.reached is None:
            self.reached = time.monotonic()
            self.until = self.reached + self.timeout + VERDICT_GRACE
        via = peer_text(sock.getsockname())  # as rank 0 should see it (a NAT would not)
        kind = "hello" if self.phase == "hello" else "ack"
        fields: dict[str, Any] = {"task": self.nonce}
        if kind == "hello":
            fields["facts"] = {k: v for k, v in {**self.facts, "via": via}.items()
                               if k not in ID_FIELDS}
        self._write(sock, encode(message(kind, self.ident, **fields)))
        buffer = b""
        while True:
            reply, buffer = self._read(sock, buffer)
            got = reply.get("kind")
            line = one_line(str(reply.get("line", ""))[:2000]) or "?"
            if got == "verdict" and reply.get("ok") is True or got == "go":
                # the only replies obeyed: each must be this task's own, in its turn
                other = self._not_mine(reply)
                if other is not None:
                    return False, other
                if got == "verdict" and self.phase == "hello":
                    self.phase = "acked"
                    self.until = time.monotonic() + ACK_SECONDS + LINGER_SECONDS + 2.0
                    self._write(sock, encode(message("ack", self.ident, task=self.nonce)))
                    continue
                if got == "go" and self.phase == "acked":
                    return True, line
                return False, (f"{self.who}: rank 0 at {self.addr}:{self.port} sent a {got} "
                               f"{'before any verdict' if got == 'go' else 'twice'}: it does "
                               "not start")
            if got in ("verdict", "abort", "late", "other-step"):
                return False, line
            return False, self._held()

    def _not_mine(self, reply: Mapping[str, Any]) -> str | None:
        """Why a reply to be obeyed (a sound verdict, a go) is not this task's: its identity
        differs from the task's own step in any field (job, step where slurmenv compares it,
        world size, master address and port), or it names another session (the task's
        nonce). None when it is this task's."""
        ident = reply.get("id")
        assert isinstance(ident, dict)  # _read checked it
        fields = [k for k in ID_FIELDS if k != "step" or self.compares_step]
        differ = [k for k in fields if ident.get(k) != self.ident.get(k)]
        if reply.get("task") != self.nonce:
            differ.append("task")
        if not differ:
            return None
        if "job" in differ:
            return (f"{self.addr}:{self.port} is held by rank 0 of job "
                    f"{one_line(ident.get('job'))}, not this task's job "
                    f"{one_line(self.ident['job'])}: two steps share it")
        theirs = ", ".join(f"{k} {one_line(ident.get(k) if k != 'task' else reply.get(k))}"
                           for k in differ)
        return (f"{self.who}: {self.addr}:{self.port} answered with another step's identity "
                f"({theirs}; this task has "
                + ", ".join(f"{k} {one_line(self.ident.get(k) if k != 'task' else 'its own')}"
                            for k in differ)
                + "): it does not start")

    def _held(self) -> str:
        return (f"{self.addr}:{self.port} answers but not as a slurmenv step check: another "
                "program holds the port")

    def _write(self, sock: socket.socket, data: bytes) -> None:
        try:
            sock.settimeout(max(0.1, self.until - time.monotonic()))
            sock.sendall(data)
        except OSError as exc:
            raise _Broken(why(exc)) from None

    def _read(self, sock: socket.socket, buffer: bytes) -> tuple[dict[str, Any], bytes]:
        while True:
            try:
                reply, rest = split(buffer)
            except ProtocolError:
                raise _Stop(self._held()) from None
            if reply is not None:
                if not isinstance(reply.get("id"), dict):
                    raise _Stop(self._held())
                return reply, rest
            left = self.until - time.monotonic()
            if left <= 0:
                raise _Stop(self._timed_out())
            try:
                sock.settimeout(left)
                chunk = sock.recv(MAX_MESSAGE + 1)
            except (socket.timeout, TimeoutError):
                raise _Stop(self._timed_out()) from None
            except OSError as exc:
                raise _Broken(why(exc)) from None
            if not chunk:
                if buffer:
                    raise _Stop(self._held())
                raise _Broken("rank 0 closed the connection without a verdict")
            buffer += chunk

    def _timed_out(self) -> str:
        if self.phase == "hello":
            return (f"{self.who}: no verdict from rank 0 at {self.addr}:{self.port} within "
                    f"{self.timeout + VERDICT_GRACE:g} s of reaching it: it does not start")
        return (f"{self.who}: no go from rank 0 at {self.addr}:{self.port} after "
                "acknowledging its verdict: it does not start")


class _Stop(Exception):
    """The session ends with this line (the task does not start)."""


def join(addr: str, ports: Sequence[int], facts: Mapping[str, Any],
         timeout: float) -> tuple[bool, str]:
    """A task other than rank 0: (whether it may start, the line to print)."""
    task = Task(addr, ports, facts, timeout)
    try:
        return task.run()
    except _Stop as stop:
        return False, str(stop)
