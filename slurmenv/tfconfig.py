"""TensorFlow's ``TF_CONFIG``: the worker list in rank order and this task's place in it."""

from __future__ import annotations

from ._compat import TYPE_CHECKING
from .errors import SlurmEnvError, is_number

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

# Linux refuses to exec with one environment string over MAX_ARG_STRLEN (128 KiB), counting
# "TF_CONFIG=" and the terminating NUL.
MAX_ARG_STRLEN = 128 * 1024
MAX_VALUE = MAX_ARG_STRLEN - len("TF_CONFIG=") - 1


def _plain(text: str) -> bool:
    """True when JSON writes ``text`` as it is between double quotes (``json.dumps``, ASCII
    output): printable ASCII without ``"`` or ``\\``. Host names and ports always are."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def _quote(text: str) -> str:
    """``json.dumps(text)``. A plain string needs no encoder; any other is quoted by json's own
    C encoder, imported only then: loading its extension module (``_json``) would cost every
    task of a step about 0.3 ms on export's path."""
    if _plain(text):
        return '"' + text + '"'
    try:
        from _json import encode_basestring_ascii
    except ImportError:  # pragma: no cover - CPython always has _json
        from json.encoder import encode_basestring_ascii
    return encode_basestring_ascii(text)


def build(workers: Sequence[str], rank: int, chief: bool = False) -> dict[str, Any]:
    """``{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": rank}}``.

    ``workers[r]`` is ``host:port`` of rank ``r``. With ``chief``, rank 0 becomes the single
    ``chief`` and the others are workers 0..n-2.
    """
    if not chief:
        return {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": rank}}
    cluster = {"chief": [workers[0]], "worker": list(workers[1:])}
    if not cluster["worker"]:
        del cluster["worker"]
    task = {"type": "chief", "index": 0} if rank == 0 else {"type": "worker", "index": rank - 1}
    return {"cluster": cluster, "task": task}


def _compact(value: Any) -> str:
    """``json.dumps(value, separators=(",", ":"))`` for dicts (str keys), lists, str and int."""
    kind = type(value)
    if kind is str:
        return _quote(value)
    if kind is int:
        return int.__repr__(value)
    if kind is list:
        try:  # the worker list: all strings, and all plain (checked at once, joined in C)
            plain = value and _plain("".join(value))
        except TypeError:
            return "[" + ",".join([_compact(item) for item in value]) + "]"
        if plain:
            return '["' + '","'.join(value) + '"]'
        return "[" + ",".join(map(_quote, value)) + "]"
    if kind is dict and all(type(key) is str for key in value):
        return "{" + ",".join([_quote(k) + ":" + _compact(v) for k, v in value.items()]) + "}"
    raise TypeError(kind)


def dumps(config: dict[str, Any], check_size: bool = True) -> str:
    """Compact JSON; refuses a value that no process could be started with."""
    try:
        text = _compact(config)
    except TypeError:  # floats, booleans, ...: not what build() makes
        import json

        text = json.dumps(config, separators=(",", ":"))
    if check_size and len(text) > MAX_VALUE:
        raise _too_large(f"{len(text)} bytes", text)
    return text


#: The fewest bytes one worker adds to TF_CONFIG: ``"h:1024",``.
MIN_WORKER = 9


def check_world(world_size: int, bound: int = 0) -> None:
    """Refuse, before building it, a TF_CONFIG that cannot fit one environment variable:
    whatever the host names (a world of 20 million ranks would otherwise cost gigabytes to
    build only to be refused by :func:`dumps`), or given ``bound``, the fewest bytes its
    worker list takes with these addresses (``Resolution.tf_config_bound``: 2,000 ranks whose
    addresses are 250 characters long are refused before 500 KB are built)."""
    if world_size * MIN_WORKER > MAX_VALUE:
        raise _too_large(f"at least {world_size * MIN_WORKER} bytes ({world_size} workers)", None)
    if bound > MAX_VALUE:
        raise _too_large(f"at least {bound} bytes ({world_size} workers)", None)


def _too_large(size: str, text: str | None) -> SlurmEnvError:
    return SlurmEnvError(
        f"TF_CONFIG would be {size}, over Linux's {MAX_ARG_STRLEN}-byte limit for "
        "one environment variable: every program started with it would fail",
        variable="TF_CONFIG",
        value=text,
        fix="build the resolver in Python instead (slurmenv.tf.cluster_resolver() or "
        "slurmenv.resolve().tf_config), or export without it: slurmenv export --for torch",
    )


def rank_addresses(config: Mapping[str, Any]) -> list[str]:
    """``host:port`` of every rank from a ``TF_CONFIG``'s cluster, in rank order (the chief,
    if any, is rank 0)."""
    cluster = config.get("cluster", {})
    return [str(a) for a in list(cluster.get("chief", [])) + list(cluster.get("worker", []))]


def port_of(address: str) -> int | None:
    """The port of ``host:port`` (None when there is none)."""
    _, colon, port = address.rpartition(":")
    return int(port) if colon and is_number(port) else None


def host_of(address: str) -> str:
    """The host of ``host:port`` (brackets of an IPv6 literal removed)."""
    host, colon, port = address.rpartition(":")
    if not colon or not is_number(port):
        host = address
    return host.strip("[]")
