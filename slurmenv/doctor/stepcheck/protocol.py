"""The step check's wire format: messages, the step's identity, and a task's facts (what it
tells rank 0, a pure function of its Resolution and options: :func:`facts_of`).

Every message is the line ``slurmenv-stepcheck 2`` and one JSON object on one line, at most
:data:`MAX_MESSAGE` bytes, with a ``kind`` and the step's identity ``id`` (job, step, world
size, master address and port: :data:`ID_FIELDS`). The kinds, in the order of a session::

    task -> rank 0   hello    id, task (a nonce), facts          "here I am, this is my world"
    rank 0 -> task   verdict  id, ok, line                       phase 1: what rank 0 found
    task -> rank 0   ack      id, task                           "I know the verdict"
    rank 0 -> task   go | abort  id, line                        phase 2: start, or do not
    task -> rank 0   outcome  id, task   (on a new connection)   "my link broke: what was it?"
    rank 0 -> task   late | other-step  id, line                 not counted (see rank0.py)

A field that is missing, null or of another type makes the message malformed: never a value
that "agrees" (:func:`problems_of`).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from typing import Any

from ... import __version__
from ...errors import SlurmEnvError, printable
from ...resolution import Resolution

MAGIC = b"slurmenv-stepcheck 2\n"
MAX_MESSAGE = 16384  # bytes of one message (magic line + JSON line)
STRING_CAP = 400  # characters of any string a task sends

#: The step's identity, in every message.
ID_FIELDS = ("job", "step", "world_size", "master_addr", "master_port")

UNKNOWN = "unknown"  # a count the task's launcher does not give (never null)

#: Every field of a task's facts (identity included) and the types it may take: all required.
FIELDS: dict[str, tuple[type, ...]] = {
    "rank": (int,), "world_size": (int,), "node": (str,), "hostname": (str,),
    "node_rank": (int, str), "nnodes": (int, str), "master_addr": (str,),
    "master_port": (int,), "tf_digest": (str,), "launcher": (str,), "job": (str,),
    "step": (str,), "version": (str,), "options": (dict,), "sources": (dict,), "via": (str,),
}
KINDS = ("hello", "verdict", "ack", "go", "abort", "outcome", "late", "other-step")


class ProtocolError(Exception):
    """A peer that does not speak the step check's protocol."""


def one_line(text: object) -> str:
    """Text from a peer for a report line: control characters, newlines included, written as
    escapes (a node name with a newline must not add a line that reads like another)."""
    shown = printable(str(text))
    return shown.replace("\n", "\\n").replace("\t", "\\t")


def encode(payload: Mapping[str, Any]) -> bytes:
    data = MAGIC + json.dumps(payload, separators=(",", ":")).encode() + b"\n"
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    return data


def split(buffer: bytes) -> tuple[dict[str, Any] | None, bytes]:
    """The first message of ``buffer`` and what follows it (None, buffer while incomplete)."""
    head = buffer[:len(MAGIC)]
    if not MAGIC.startswith(head):
        raise ProtocolError("does not speak the slurmenv step check 2 (wrong first line)")
    end = buffer.find(b"\n", len(MAGIC))
    if end < 0:
        if len(buffer) > MAX_MESSAGE:
            raise ProtocolError(f"more than {MAX_MESSAGE} bytes")
        return None, buffer
    if end + 1 > MAX_MESSAGE:
        raise ProtocolError(f"more than {MAX_MESSAGE} bytes")
    try:
        payload = json.loads(buffer[len(MAGIC):end])
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(payload, dict):
        raise ProtocolError("not a JSON object")
    return payload, buffer[end + 1:]


def message(kind: str, ident: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    assert kind in KINDS
    return {"kind": kind, "id": dict(ident), **fields}


def identity(facts: Mapping[str, Any]) -> dict[str, Any]:
    return {key: facts.get(key) for key in ID_FIELDS}


def _typed(value: object, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # JSON true is no count
        return bool in types
    if isinstance(value, str) and int in types and str in types:
        return value == UNKNOWN
    return isinstance(value, types)


def problems_of(payload: Mapping[str, Any]) -> list[str]:
    """The fields of a hello's facts (its ``id`` and ``facts`` together) that are missing, null
    or of another type: any of them makes the message untrusted."""
    out = []
    for key, types in FIELDS.items():
        if key not in payload:
            out.append(f"no {key}")
        elif payload[key] is None:
            out.append(f"{key} null")
        elif not _typed(payload[key], types):
            out.append(f"{key} not a {'/'.join(t.__name__ for t in types)}")
    for key in ("options", "sources"):
        value = payload.get(key)
        if isinstance(value, dict) and not all(isinstance(v, str) for v in value.values()):
            out.append(f"{key} not text")
    return out


def hello_facts(payload: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """A hello's facts (id and facts merged) and why it cannot be counted at all (no rank, not
    a hello): (facts, None) when its rank is usable, even if other fields are wrong."""
    if payload.get("kind") != "hello":
        return None, f"a {one_line(str(payload.get('kind'))[:20])} message before any hello"
    ident, facts = payload.get("id"), payload.get("facts")
    if not isinstance(ident, dict) or not isinstance(facts, dict):
        return None, "a hello without id or facts"
    merged = {**facts, **{k: ident.get(k) for k in ID_FIELDS}}
    rank = merged.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 1 << 31:
        return None, "no rank in its message"
    if not isinstance(payload.get("task"), str):
        return None, "a hello without its task nonce"
    return merged, None


def _cap(value: object) -> str:
    return str(value)[:STRING_CAP]


def tf_digest(res: Resolution) -> str:
    """8 hex digits of TF_CONFIG's worker list (as ``show --one-line``'s ``cluster=``), or
    ``none`` where TF_CONFIG cannot be built."""
    import hashlib

    try:
        cluster = res.tf_config.get("cluster", {})
    except SlurmEnvError:
        return "none"
    return hashlib.sha1(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:8]


def facts_of(res: Resolution, opts: Mapping[str, Any]) -> dict[str, Any]:
    """What a task sends rank 0 (and what rank 0 compares with its own): every field of
    :data:`protocol.FIELDS` but ``via`` (the client adds it), none of them null."""
    def known(name: str, value: int) -> int | str:
        return UNKNOWN if name in res.unknown else value

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
        "job": _cap(res.job_id or ""), "step": _cap(res.step_id or ""),
        "version": __version__,
        # the port is compared as MASTER_PORT, with where it came from
        "options": {k: _cap(v) for k, v in sorted(opts.items()) if k != "port"},
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
