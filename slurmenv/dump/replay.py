"""Reading a dump back (``--from``): :func:`load` checks every field before it is used; a
:class:`Dump` replays the recorded environment (with copies of its files) and resolution; and
:func:`replay_report` says whether the replay reproduced what was recorded on the cluster.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import __version__, resolve
from ..errors import SlurmEnvError
from ..lean import NamedTuple
from ..resolution import Resolution
from .allowlist import FILE_VARIABLES
from .capture import FORMAT, FORMAT_KEY, error_dict, record, unrecorded_path

FREE_PORT_SOURCE = "a port free on 127.0.0.1 now"  # derive.FREE_PORT_SOURCE, also in old dumps


class Dump(NamedTuple):
    """A dump read back from a file (the fields: ``slurmenv/dump/__init__.py``)."""

    path: str
    environ: dict[str, str]
    ephemeral_range: tuple[int, int] | None
    cpu_affinity: int | None
    options: dict[str, Any]
    files: dict[str, str]
    recorded: dict[str, Any] | None
    probe: dict[str, Any] | None
    hostname: str
    version: str
    created: str
    step_evidence: str | None = None
    #: The launcher agent the recording task ran under (evidence.agent_ancestor), if any.
    enclosure: str | None = None
    binary_files: dict[str, str] = {}  # noqa: RUF012 - NamedTuple default, never mutated
    #: The files the recording task's variables named that the dump does not hold, and why.
    files_not_recorded: dict[str, str] = {}  # noqa: RUF012 - NamedTuple default, never mutated
    #: How many strings of the record were redacted as credentials (secrets.scrub).
    redacted: int = 0

    @contextmanager
    def environment(self) -> Iterator[dict[str, str]]:
        """The recorded environment, each recorded file a temporary copy its variable points
        at (a file not recorded: :func:`capture.unrecorded_path`), for the ``with`` block."""
        import base64

        env = dict(self.environ)
        if not any(name in env for name in FILE_VARIABLES):
            yield env
            return
        with tempfile.TemporaryDirectory(prefix="slurmenv-replay-") as tmp:
            copies = [(name, content.encode("utf-8")) for name, content in self.files.items()]
            copies += [(name, base64.b64decode(content)) for name, content in self.binary_files.items()]
            for name in FILE_VARIABLES:  # a file the dump did not record is not read here
                if name in env:
                    env[name] = unrecorded_path(name)
            for name, content in copies:
                if name in FILE_VARIABLES:
                    env[name] = path = os.path.join(tmp, name.lower())
                    with open(path, "wb") as handle:
                        handle.write(content)
            yield env

    @property
    def replay_options(self) -> dict[str, Any]:
        """The recorded options, with the recorded task's CPU count (thread counts follow it,
        a fact of its node) and no rival launches (this machine's processes are not its)."""
        return {**self.options, "cpus": self.cpu_affinity, "rivals": (),
                "step_evidence": self.step_evidence, "enclosure": self.enclosure}

    def resolve(self, **overrides: Any) -> Resolution:
        """Replay the resolution, ``overrides`` (not None) replacing the recorded options;
        without the DNS lookup of ``--resolve-addr`` (the names are the cluster's)."""
        opts = self.replay_options
        opts.update({k: v for k, v in overrides.items() if v is not None})
        opts["resolve_addr"] = False
        with self.environment() as env:
            res = resolve(env, ephemeral_range=self.ephemeral_range, **opts)
            try:  # read the recorded files while the copies exist
                res.node_of  # noqa: B018 - computes and caches the layout
            except SlurmEnvError:
                pass
        return res

    def replay(self, **overrides: Any) -> tuple[Resolution | None, dict[str, Any]]:
        """``(resolution or None, what record() gives for it or the error)``."""
        try:
            res = self.resolve(**overrides)
        except SlurmEnvError as exc:
            return None, error_dict(exc)
        return res, record(res)

    def asked_resolve_addr(self) -> bool:
        """Whether the recorded task asked for the DNS lookup of MASTER_ADDR."""
        flag = str(self.environ.get("SLURMENV_RESOLVE_ADDR", "")).strip().lower()
        return bool(self.options.get("resolve_addr")) or flag in ("1", "true", "yes", "on")


#: The largest dump read. The largest a cluster writes: 100,000 nodes of 8 tasks, names that
#: do not compress, is 49 MB (its layout, two numbers per rank); -m arbitrary adds a host file
#: of at most FILE_LIMIT (32 MiB). Measured in tests/test_dump_safety.py; 128 MiB leaves margin.
LOAD_LIMIT = 1 << 27
#: The most memory a dump may take once parsed, estimated before parsing from what the text
#: holds (:func:`_parse_cost`): that 49 MB dump is estimated at about 300 MB (it takes 288 MB,
#: peak); 40 MB of ``[],[],...`` took 1 GB before this bound and is refused now.
LOAD_COST_LIMIT = 1 << 29
#: The deepest nesting a dump may have: slurmenv writes at most 5 levels (resolution ->
#: summary -> tf_config -> cluster -> worker); comparing deeper ones recursed without end.
LOAD_DEPTH_LIMIT = 32
LOAD_FIX = "pass a file written by 'slurmenv dump', unchanged"
#: Bytes of memory per piece of parsed JSON, upper bounds measured on CPython 3.11 (64-bit;
#: tests/test_dump_safety.py checks them): a short str (49 + its text), any value's slot in its
#: list or dict and a number (8-40), a small list (56-64), a small dict (64-184).
_STRING_COST, _VALUE_COST, _LIST_COST, _DICT_COST = 64, 40, 72, 200


def _parse_cost(text: str) -> int:
    """An upper bound of the memory ``json.loads(text)`` takes, from counts of characters
    (no parsing, linear in the text): the text twice (bytes and str), one string per two
    quotes, one value per comma or colon, one container per opening bracket."""
    strings = text.count('"') // 2
    values = text.count(",") + text.count(":") + 1
    containers = text.count("[") * _LIST_COST + text.count("{") * _DICT_COST
    return 2 * len(text) + strings * _STRING_COST + values * _VALUE_COST + containers


_NESTED = frozenset((list, dict))  # what json.loads nests: exactly these types


def _too_deep(data: Any, limit: int) -> bool:
    """Whether ``data`` nests deeper than ``limit`` lists and dicts (iterative: no recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        children = value.values() if isinstance(value, dict) else value
        if _NESTED.isdisjoint(map(type, children)):  # C speed: a layout's million numbers
            continue
        stack.extend((child, depth + 1) for child in children if isinstance(child, (list, dict)))
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _no_fraction(text: str) -> Any:
    """No field of a dump is a fractional number: refused at the first (before millions)."""
    raise ValueError(f"{text[:20]} is a fractional number, which no field of a dump holds")


def _bad(path: str, what: str) -> SlurmEnvError:
    return SlurmEnvError(f"the dump's {what}", variable="--from", value=path, fix=LOAD_FIX)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _texts(value: Any) -> bool:
    """Whether ``value`` is a mapping of strings (JSON's keys are strings)."""
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _strings(data: dict[str, Any], key: str, path: str) -> dict[str, str]:
    value = data.get(key)
    if value is not None and not _texts(value):
        raise _bad(path, f"'{key}' is not a mapping of strings")
    return value or {}


def _options(data: dict[str, Any], path: str) -> dict[str, Any]:
    """The recorded options, each read back through the options table's own parser: only
    values the command line could have given."""
    from ..options import FLAG, PARSERS, RANGE, TABLE

    value = data.get("options")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(path, "'options' is not a mapping")
    rows = {row.field: row for row in TABLE}
    out: dict[str, Any] = {}
    for field, given in value.items():
        row = rows.get(field)
        if row is None:
            raise _bad(path, f"options name {field!r}, which is no option of slurmenv")
        if given is None:
            continue
        where = f"options.{field} in the dump {path}"
        if row.kind == FLAG:
            if not isinstance(given, bool):
                raise _bad(path, f"options.{field} is not true or false")
            out[field] = given
            continue
        if row.kind == RANGE and isinstance(given, list) and len(given) == 2 and all(
            map(_is_int, given)
        ):
            given = f"{given[0]}-{given[1]}"
        elif _is_int(given):
            given = str(given)
        if not isinstance(given, str):
            raise _bad(path, f"options.{field} is not a value of that option")
        PARSERS[row.kind](given, where)  # refuses what the command line would refuse
        out[field] = given
    return out


def _is_error(value: Any) -> bool:
    """Whether ``value`` is an error as :func:`capture.error_dict` records it."""
    return (
        isinstance(value, dict) and isinstance(value.get("error"), str)
        and set(value) <= {"error", "variable", "value", "fix"}
        and all(value.get(k) is None or isinstance(value[k], str)
                for k in ("variable", "value", "fix"))
    )


def _resolution(data: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The recorded resolution, checked to be what :func:`capture.record` writes (or the error
    :func:`capture.error_dict` writes): show's replay report and doctor read its fields."""
    value = data.get("resolution")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad(path, "'resolution' is not a mapping")
    if "error" in value:
        if not _is_error(value):
            raise _bad(path, "'resolution' is no recorded error (error, variable, value, fix)")
        return value
    summary = value.get("summary")
    if not isinstance(summary, dict):
        raise _bad(path, "'resolution.summary' is not a mapping")
    if "sources" in summary and not _texts(summary["sources"]):
        raise _bad(path, "'resolution.summary.sources' is not a mapping of strings")
    env = value.get("env")
    if env is not None and not _is_error(env) and not _texts(env):
        raise _bad(path, "'resolution.env' is neither a mapping of strings nor an error")
    layout = value.get("layout")
    if layout is not None and not _is_error(layout) and not (
        isinstance(layout, dict)
        and isinstance(layout.get("hosts"), list)
        and all(isinstance(h, str) for h in layout["hosts"])
        and all(isinstance(layout.get(k), list) and all(map(_is_int, layout[k]))
                for k in ("node_of", "local_of"))
    ):
        raise _bad(path, "'resolution.layout' is neither hosts, node_of, local_of nor an error")
    return value


def _text(data: dict[str, Any], key: str, path: str, default: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or len(value) > 200:
        raise _bad(path, f"'{key}' is not a text of at most 200 characters")
    return value


def _count(data: dict[str, Any], key: str, path: str) -> int:
    value = data.get(key, 0)
    if not _is_int(value) or value < 0:
        raise _bad(path, f"'{key}' is not a count")
    return int(value)


def _read(path: str) -> bytes:
    """The bytes of the dump ``path`` ('-': standard input), at most :data:`LOAD_LIMIT`."""
    from .. import readfile as files

    if path == "-":
        raw: bytes | None = sys.stdin.buffer.read(LOAD_LIMIT + 1)
        if raw is not None and len(raw) > LOAD_LIMIT:
            raise _bad(path, f"size is over {LOAD_LIMIT} bytes (LOAD_LIMIT)")
    else:
        raw = files.read(path, "--from", LOAD_FIX, limit=LOAD_LIMIT)
    if raw is None:
        raise SlurmEnvError("cannot read the dump", variable="--from", value=path, fix=LOAD_FIX)
    return raw


def load(path: str) -> Dump:
    """Read a dump written by ``slurmenv dump``; SlurmEnvError naming what is wrong, whatever
    the file holds: its size and parsing cost bounded before it is parsed (LOAD_LIMIT,
    LOAD_COST_LIMIT), then its nesting (LOAD_DEPTH_LIMIT) and every field's shape."""
    raw = _read(path)
    try:
        text = raw.decode("utf-8")
        del raw
        cost = _parse_cost(text)
        if cost > LOAD_COST_LIMIT:
            raise _bad(path, f"text would take about {cost >> 20} MiB once parsed, over "
                       f"{LOAD_COST_LIMIT >> 20} MiB (LOAD_COST_LIMIT): it holds far more "
                       "values than a dump of the largest step")
        data = json.loads(text, parse_constant=_no_constant, parse_float=_no_fraction)
        del text
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        why = (f"nested deeper than {LOAD_DEPTH_LIMIT} levels" if isinstance(exc, RecursionError)
               else str(exc)[:200] or type(exc).__name__)
        raise SlurmEnvError(
            f"the dump is not JSON ({why})", variable="--from", value=path, fix=LOAD_FIX,
        ) from None
    if not isinstance(data, dict) or data.get(FORMAT_KEY) != FORMAT:
        raise SlurmEnvError(f"not a slurmenv dump of format {FORMAT}", variable="--from",
                            value=path, fix=LOAD_FIX)
    if _too_deep(data, LOAD_DEPTH_LIMIT):
        raise _bad(path, f"nesting is deeper than {LOAD_DEPTH_LIMIT} levels (LOAD_DEPTH_LIMIT)")
    if not isinstance(data.get("environ"), dict):
        raise _bad(path, "'environ' is not a mapping of strings")
    eph = data.get("ephemeral_range")
    if eph is not None and not (
        isinstance(eph, list) and len(eph) == 2 and all(map(_is_int, eph))
        and 1 <= eph[0] <= eph[1] <= 65535
    ):
        raise _bad(path, "'ephemeral_range' is not [low, high] with ports 1-65535")
    cpus = data.get("cpu_affinity")
    if cpus is not None and not (_is_int(cpus) and 0 <= cpus <= 1 << 20):
        raise _bad(path, "'cpu_affinity' is not a CPU count")
    if data.get("probe") is not None and not isinstance(data["probe"], dict):
        raise _bad(path, "'probe' is not a mapping")
    binary = _strings(data, "binary_files", path)
    import base64

    for name, content in binary.items():
        try:
            base64.b64decode(content, validate=True)
        except ValueError:  # binascii.Error is one
            raise _bad(path, f"binary_files.{name} is not base64") from None
    evidence = data.get("step_evidence")
    if evidence is not None and not isinstance(evidence, str):
        raise _bad(path, "'step_evidence' is not text")
    enclosure = data.get("enclosure")
    if enclosure is not None and not isinstance(enclosure, str):
        raise _bad(path, "'enclosure' is not text")
    return Dump(
        path=path,
        environ=_strings(data, "environ", path),
        ephemeral_range=(eph[0], eph[1]) if eph else None,
        cpu_affinity=cpus or None,
        options=_options(data, path),
        files=_strings(data, "files", path),
        binary_files=binary,
        recorded=_resolution(data, path),
        probe=data.get("probe"),
        hostname=_text(data, "hostname", path, ""),
        version=_text(data, "slurmenv_version", path, "?"),
        created=_text(data, "created", path, "?"),
        step_evidence=evidence or None,
        enclosure=enclosure or None,
        files_not_recorded=_strings(data, "files_not_recorded", path),
        redacted=_count(data, "redacted", path),
    )


def differences(recorded: Any, replayed: Any, path: str = "") -> list[str]:
    """Where two recorded resolutions differ, as ``path: old -> new`` lines."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        out = []
        for key in sorted(set(recorded) | set(replayed), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in recorded or key not in replayed:
                out.append(f"{sub}: {recorded.get(key)!r} -> {replayed.get(key)!r}")
            else:
                out.extend(differences(recorded[key], replayed[key], sub))
        return out
    if recorded != replayed:
        return [f"{path}: {_short(recorded)} -> {_short(replayed)}"]
    return []


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 120 else text[:117] + "..."


_PROSE = ("sources", "notes", "tf_config_error", "gpu_source", "message", "fix")


def essential(recorded: Any) -> Any:
    """A recorded resolution without its explanations (``sources``, ``notes``, error
    messages and fixes): the values, which must not change when only the wording does."""
    if isinstance(recorded, dict):
        out = {k: essential(v) for k, v in recorded.items() if k not in _PROSE}
        if "error" in recorded and isinstance(recorded["error"], str):
            out["error"] = True  # which variable failed is kept, not the wording
        return out
    if isinstance(recorded, list):
        return [essential(v) for v in recorded]
    return recorded


def _restrict(replayed: Any, recorded: Any) -> Any:
    """``replayed`` without the dict keys ``recorded`` lacks (fields added by a later version)."""
    if isinstance(replayed, dict) and isinstance(recorded, dict):
        return {k: _restrict(v, recorded[k]) for k, v in replayed.items() if k in recorded}
    return replayed


def same_values(recorded: Any, replayed: Any) -> bool:
    """Whether a replay gives the recorded values: explanations and fields the recording
    slurmenv did not have yet are not compared."""
    return bool(essential(recorded) == essential(_restrict(replayed, recorded)))


def replay_report(dump: Dump, replayed: dict[str, Any]) -> list[str]:
    """Lines saying whether the replay reproduced what was recorded on the cluster."""
    origin = f"slurmenv {dump.version} on {dump.hostname or '?'} at {dump.created}"
    if dump.recorded is None:
        return [f"replay: the dump holds no recorded resolution ({origin})"]
    diff = differences(dump.recorded, replayed)
    if not diff:
        return [f"replay: identical to the resolution recorded by {origin}"]
    if same_values(dump.recorded, replayed):
        changed = ", ".join(d.split(":")[0] for d in diff[:5])
        return [(f"replay: same values as recorded by {origin}; only the explanations differ "
                 f"(slurmenv {__version__} here): {changed}")]
    lines = [f"replay: DIFFERS from the resolution recorded by {origin}:"]
    lines.extend(f"  {line}" for line in diff[:40])
    if len(diff) > 40:
        lines.append(f"  ... and {len(diff) - 40} more")
    if dump.asked_resolve_addr():
        lines.append("  (the DNS lookup of --resolve-addr is not replayed: MASTER_ADDR stays a name)")
    port_source = dump.recorded.get("summary", {}).get("sources", {}).get("MASTER_PORT", "")
    if dump.redacted:
        lines.append(f"  ({dump.redacted} value(s) were redacted as credentials when the dump "
                     "was written: the replay reads REDACTED where the task read them)")
    lines.extend(f"  ({name}'s file is not in the dump: {why})"
                 for name, why in sorted(dump.files_not_recorded.items()))
    if str(port_source).startswith(FREE_PORT_SOURCE):
        lines.append("  (outside a step the port is whatever was free on that machine)")
    return lines

