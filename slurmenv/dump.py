"""``slurmenv dump``: record what slurmenv reads in one task, to replay it anywhere.

A dump is a JSON file holding

* ``environ``: the variables slurmenv reads (:data:`VARIABLES`, plus every ``SLURMENV_*``) and
  nothing else: no secrets. Proxy values keep their host but lose any ``user:password@``;
* ``ephemeral_range``: this node's ``/proc/sys/net/ipv4/ip_local_port_range``;
* ``step_evidence``: local evidence of a Slurm task step (a ``slurmstepd`` ancestor), which
  refuses the single-process default in a scrubbed environment;
* ``files``: the content of the files the launchers read (:data:`FILE_VARIABLES`: Slurm's
  ``SLURM_HOSTFILE`` for ``-m arbitrary``, PALS's apinfo file, ``PBS_NODEFILE``, LSF's rank
  file), which the layout needs and which may be gone later (PALS removes its apinfo file when
  the application ends); binary ones (the apinfo file) under ``binary_files``, base64;
* ``options``: resolution options given on the command line of ``dump``;
* ``resolution``: what slurmenv resolved there (or the error it gave), so a replay can prove it
  reproduces the same answer;
* ``probe`` (with ``--probe``): the node facts ``slurmenv doctor`` looks at (the master's
  address as this node resolves it, the interface reaching it, listening ports, CPUs).

``slurmenv show --from FILE`` and ``slurmenv doctor --from FILE`` replay it on any machine.
"""

from __future__ import annotations

import argparse
import datetime
import errno
import json
import os
import re
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from . import __version__, resolve
from ._compat import NamedTuple
from .errors import SlurmEnvError
from .launchers import base
from .resolution import Resolution

FORMAT = 1
FREE_PORT_SOURCE = "a port free on 127.0.0.1 now"  # derive.FREE_PORT_SOURCE, also in old dumps
FORMAT_KEY = "slurmenv_dump"

#: Slurm variables read besides the launchers' own (each launcher module declares its
#: VARIABLES and PREFIXES, see launchers/base.py): the cluster, the allocation doctor compares
#: with the step, CPUs and GPUs.
SLURM_VARIABLES = (
    "SLURM_CLUSTER_NAME",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE",
    # what Lightning's own SLURMEnvironment reads (doctor's Lightning check)
    "SLURM_NTASKS_PER_NODE", "SLURM_JOB_NAME",
    "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS",
    "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_TASK", "SLURM_GPUS_PER_NODE", "SLURM_GPU_BIND",
    "SLURMD_TRES_BIND",
)  # fmt: skip

#: Devices, threads and network choices (GPU binding, thread counts, doctor).
NODE_VARIABLES = (
    "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
)  # fmt: skip

#: Proxy variables: gRPC reads the lowercase ones; other HTTP clients the uppercase ones too.
PROXY_VARIABLES = (
    "grpc_proxy", "https_proxy", "http_proxy", "HTTPS_PROXY", "HTTP_PROXY",
    "no_grpc_proxy", "no_proxy", "NO_PROXY",
)  # fmt: skip

#: Values already set that the outputs compare with or replace.
OUTPUT_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "NNODES", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG",
)  # fmt: skip


def _launcher_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every registered launcher's VARIABLES and PREFIXES."""
    from . import launchers

    names: list[str] = []
    prefixes: list[str] = []
    for module in launchers.modules():
        names.extend(module.VARIABLES)
        names.extend(getattr(module, "TASK_VARIABLES", ()))  # the stray check reads them
        prefixes.extend(module.PREFIXES)
    return tuple(names), tuple(prefixes)


_LAUNCHER_VARIABLES, _LAUNCHER_PREFIXES = _launcher_names()
#: Every variable a dump may hold (the allow-list), plus those matching PREFIXES.
VARIABLES = tuple(dict.fromkeys(
    _LAUNCHER_VARIABLES + SLURM_VARIABLES + OUTPUT_VARIABLES + NODE_VARIABLES + PROXY_VARIABLES
))
PREFIXES = ("SLURMENV_", *_LAUNCHER_PREFIXES)
REDACTED = base.REDACTED
redact_proxy = base.redact_proxy

DEFAULT_OUTPUT = "slurmenv-dump-%j.%s.%t.json"


def is_read(name: str) -> bool:
    """Whether slurmenv reads the variable ``name`` (so a dump keeps it)."""
    return name in VARIABLES or name.startswith(PREFIXES)


def select(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that slurmenv reads, sorted by name, with credentials
    (``*_TOKEN``, ``OMPI_MCA_orte_precondition_transports``, ...) and proxy passwords
    redacted (``launchers.base.redact``)."""
    return {
        name: base.redact(name, str(environ[name])) for name in sorted(environ) if is_read(name)
    }


def expand_output(
    pattern: str, environ: Mapping[str, str], resolved: Mapping[str, Any] | None = None
) -> str:
    """srun-style file name patterns: %j job, %s step, %t rank, %n node index, %N host, %%.

    ``resolved`` (a resolution's ``to_dict()``) gives the rank and node index when known: an
    MPI rank's SLURM_PROCID/SLURM_NODEID are a daemon step's or the batch script's, the same
    in several ranks, whose dumps would overwrite each other.
    """
    summary = resolved or {}
    values = {
        "j": environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or "nojob",
        "s": environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID") or "nostep",
        "t": str(summary.get("rank", environ.get("SLURM_PROCID") or "0")),
        "n": str(summary.get("node_rank", environ.get("SLURM_NODEID") or "0")),
        "N": environ.get("SLURMD_NODENAME") or socket.gethostname(),
    }
    safe = {key: _file_name_part(value) for key, value in values.items()}
    safe["%"] = "%"
    return re.sub(r"%([jstnN%])", lambda m: safe[m.group(1)], pattern)


def _file_name_part(value: str) -> str:
    """``value`` as a piece of a file name that stays in its directory: only letters, digits,
    ``.``, ``_`` and ``-`` (``/`` and the rest become ``_``), never ``.`` or ``..``, at most
    64 characters. A variable such as ``SLURMD_NODENAME=../../x`` cannot move the file."""
    text = re.sub(r"[^A-Za-z0-9._-]", "_", value)[:64]
    return "_" if text.strip(".") == "" else text


def _error_dict(exc: SlurmEnvError) -> dict[str, Any]:
    return {"error": exc.message, "variable": exc.variable, "value": exc.value, "fix": exc.fix}


def record(res: Resolution) -> dict[str, Any]:
    """What a replay must reproduce: ``to_dict()``, the variables, and the whole layout."""
    data: dict[str, Any] = {"summary": res.to_dict()}
    try:
        data["env"] = res.env("all")
    except SlurmEnvError as exc:
        data["env"] = _error_dict(exc)
    try:
        data["layout"] = {
            "hosts": list(res.hosts), "node_of": list(res.node_of), "local_of": list(res.local_of)
        }
    except SlurmEnvError as exc:
        data["layout"] = _error_dict(exc)
    return data


def _affinity() -> int | None:
    """How many CPUs this task may run on (thread counts follow it when -c was not given)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    return len(getaffinity(0)) if getaffinity is not None else None


#: Variables naming files a launcher reads to lay out the task: the launcher modules' FILES.
FILE_VARIABLES = ("SLURM_HOSTFILE", "PALS_APINFO", "PBS_NODEFILE", "LSB_DJOB_RANKFILE")
#: The largest file a dump records (a host file of a million ranks is about 20 MB).
FILE_LIMIT = 1 << 25
#: The file a replay points a variable of FILE_VARIABLES at when the dump holds no copy of its
#: file: never the replaying machine's file of that name.
NOT_RECORDED = "not-recorded-in-the-dump"


def _read_files(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(text files, binary files base64) named by :data:`FILE_VARIABLES` and readable here."""
    import base64

    text: dict[str, str] = {}
    binary: dict[str, str] = {}
    for name in FILE_VARIABLES:
        path = environ.get(name)
        if not path:
            continue
        from . import files

        try:
            data = files.read(path, name, "", limit=FILE_LIMIT)
        except SlurmEnvError:  # not a regular file, or too large: not recorded
            continue
        if data is None:
            continue
        try:
            if b"\0" not in data:
                text[name] = data.decode("utf-8")
                continue
        except UnicodeDecodeError:
            pass
        binary[name] = base64.b64encode(data).decode("ascii")
    return text, binary


def collect(
    environ: Mapping[str, str] | None = None,
    options: Mapping[str, Any] | None = None,
    probe: bool = False,
) -> dict[str, Any]:
    """Build a dump of this task (``environ`` defaults to ``os.environ``)."""
    from . import ports

    env = os.environ if environ is None else environ
    opts = {k: v for k, v in (options or {}).items() if v is not None}
    ephemeral = ports.ephemeral_range()
    data: dict[str, Any] = {
        FORMAT_KEY: FORMAT,
        "slurmenv_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "ephemeral_range": list(ephemeral) if ephemeral else None,
        "cpu_affinity": _affinity(),
        "options": opts,
        "environ": select(env),
    }
    data["files"], data["binary_files"] = _read_files(env)
    from .launchers import evidence

    found = evidence.find()
    data["step_evidence"] = found
    try:
        res: Resolution | None = resolve(
            env, ephemeral_range=ephemeral, step_evidence=found, **opts
        )
        assert res is not None
        data["resolution"] = record(res)
    except SlurmEnvError as exc:
        res = None
        data["resolution"] = _error_dict(exc)
    if probe:
        from .doctor.probe import probe as probe_node

        data["probe"] = probe_node(env, options=opts)
    return data


class Dump(NamedTuple):
    """A dump read back from a file (see the module docstring for the fields)."""

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
    binary_files: dict[str, str] = {}  # noqa: RUF012 - NamedTuple default, never mutated

    @contextmanager
    def environment(self) -> Iterator[dict[str, str]]:
        """The recorded environment, to resolve inside the ``with`` block.

        Each recorded file (``SLURM_HOSTFILE``, the PALS apinfo file, ...) is a temporary copy
        its variable points at. Resolve with :attr:`replay_options`, which carry the recorded
        task's CPU count.
        """
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
                    env[name] = os.path.join(tmp, NOT_RECORDED, name.lower())
            for name, content in copies:
                if name not in FILE_VARIABLES:
                    continue
                path = os.path.join(tmp, name.lower())
                with open(path, "wb") as handle:
                    handle.write(content)
                env[name] = path
            yield env

    @property
    def replay_options(self) -> dict[str, Any]:
        """The recorded options plus the recorded task's CPU count (``resolve(cpus=...)``):
        thread counts follow the task's CPU affinity, a fact of its node, not of this one. And
        no other process (``rivals=()``): the processes of this machine are not the recorded
        node's, so a replay does not look for rival launches (``rivals.py``)."""
        return {**self.options, "cpus": self.cpu_affinity, "rivals": (),
                "step_evidence": self.step_evidence}

    def resolve(self, **overrides: Any) -> Resolution:
        """Replay the resolution; ``overrides`` (not None) replace the recorded options.

        The DNS lookup of ``--resolve-addr`` is not replayed (the names belong to the cluster).
        """
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
            return None, _error_dict(exc)
        return res, record(res)

    def asked_resolve_addr(self) -> bool:
        """Whether the recorded task asked for the DNS lookup of MASTER_ADDR."""
        flag = str(self.environ.get("SLURMENV_RESOLVE_ADDR", "")).strip().lower()
        return bool(self.options.get("resolve_addr")) or flag in ("1", "true", "yes", "on")


#: The largest dump read (a recorded host file of a million ranks is about 20 MB).
LOAD_LIMIT = 1 << 28
LOAD_FIX = "pass a file written by 'slurmenv dump', unchanged"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _bad(path: str, what: str) -> SlurmEnvError:
    return SlurmEnvError(f"the dump's {what}", variable="--from", value=path, fix=LOAD_FIX)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _strings(data: dict[str, Any], key: str, path: str) -> dict[str, str]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _bad(path, f"'{key}' is not a mapping of strings")
    return value


def _options(data: dict[str, Any], path: str) -> dict[str, Any]:
    """The recorded options, each read back through the options table's own parser (as text,
    or a bool for a flag), so a replay gets only values the command line could have given."""
    from .options import FLAG, PARSERS, RANGE, TABLE

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


def load(path: str) -> Dump:
    """Read a dump written by ``slurmenv dump``; SlurmEnvError naming what is wrong if it is
    not one, whatever the file holds (every field is checked before it is used)."""
    from . import files

    try:
        if path == "-":
            raw: bytes | None = sys.stdin.buffer.read(LOAD_LIMIT + 1)
            if raw is not None and len(raw) > LOAD_LIMIT:
                raise _bad(path, f"size is over {LOAD_LIMIT} bytes")
        else:
            raw = files.read(path, "--from", LOAD_FIX, limit=LOAD_LIMIT)
        if raw is None:
            raise SlurmEnvError(
                "cannot read the dump", variable="--from", value=path, fix=LOAD_FIX
            )
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise SlurmEnvError(
            f"the dump is not JSON ({str(exc)[:200] or type(exc).__name__})", variable="--from",
            value=path, fix=LOAD_FIX,
        ) from None
    if not isinstance(data, dict) or data.get(FORMAT_KEY) != FORMAT:
        raise SlurmEnvError(
            f"not a slurmenv dump of format {FORMAT}", variable="--from", value=path,
            fix=LOAD_FIX,
        )
    environ = data.get("environ")
    if not isinstance(environ, dict):
        raise _bad(path, "'environ' is not a mapping of strings")
    environ = _strings(data, "environ", path)
    eph = data.get("ephemeral_range")
    if eph is not None and not (
        isinstance(eph, list) and len(eph) == 2 and all(map(_is_int, eph))
        and 1 <= eph[0] <= eph[1] <= 65535
    ):
        raise _bad(path, "'ephemeral_range' is not [low, high] with ports 1-65535")
    cpus = data.get("cpu_affinity")
    if cpus is not None and not (_is_int(cpus) and 0 <= cpus <= 1 << 20):
        raise _bad(path, "'cpu_affinity' is not a CPU count")
    for key in ("resolution", "probe"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise _bad(path, f"'{key}' is not a mapping")
    binary = _strings(data, "binary_files", path)
    import base64
    import binascii

    for name, content in binary.items():
        try:
            base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise _bad(path, f"binary_files.{name} is not base64") from None
    evidence = data.get("step_evidence")
    if evidence is not None and not isinstance(evidence, str):
        raise _bad(path, "'step_evidence' is not text")
    return Dump(
        path=path,
        environ=environ,
        ephemeral_range=(eph[0], eph[1]) if eph else None,
        cpu_affinity=cpus or None,
        options=_options(data, path),
        files=_strings(data, "files", path),
        binary_files=binary,
        recorded=data.get("resolution"),
        probe=data.get("probe"),
        hostname=str(data.get("hostname", "")),
        version=str(data.get("slurmenv_version", "?")),
        created=str(data.get("created", "?")),
        step_evidence=evidence or None,
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
        same = (
            f"replay: same values as recorded by {origin}; only the explanations differ "
            f"(slurmenv {__version__} here): {changed}"
        )
        return [same]
    lines = [f"replay: DIFFERS from the resolution recorded by {origin}:"]
    lines.extend(f"  {line}" for line in diff[:40])
    if len(diff) > 40:
        lines.append(f"  ... and {len(diff) - 40} more")
    if dump.asked_resolve_addr():
        lines.append("  (the DNS lookup of --resolve-addr is not replayed: MASTER_ADDR stays a name)")
    port_source = dump.recorded.get("summary", {}).get("sources", {}).get("MASTER_PORT", "")
    if str(port_source).startswith(FREE_PORT_SOURCE):
        lines.append("  (outside a step the port is whatever was free on that machine)")
    return lines


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The resolution options given on the command line (the options table's, see
    cli.add_resolution_options)."""
    from .options import given_in

    return given_in(args)


def build_parser() -> argparse.ArgumentParser:
    from .cli import add_resolution_options

    parser = argparse.ArgumentParser(
        prog="slurmenv dump",
        description="Write what slurmenv reads in this task (no secrets) to a JSON file that "
        "'slurmenv show --from FILE' and 'slurmenv doctor --from FILE' replay anywhere. "
        "Run it where the problem is: srun slurmenv dump",
    )
    parser.add_argument(
        "-o", "--output", default=DEFAULT_OUTPUT, metavar="FILE",
        help=f"file to write, '-' for stdout; %%j job, %%s step, %%t rank, %%n node index, "
        f"%%N host name (default {DEFAULT_OUTPUT.replace('%', '%%')})",
    )
    parser.add_argument(
        "--force", action="store_true",
        help="replace an existing file (never through a symbolic link)",
    )
    parser.add_argument(
        "--probe", action="store_true",
        help="also record the node facts doctor checks (DNS answer for the master, interfaces, "
        "listening ports, CPUs): one DNS lookup per task",
    )
    add_resolution_options(parser)
    return parser


def write_new(path: str, text: str, force: bool = False) -> None:
    """Write ``text`` to a new file ``path``: an existing file is refused (FileExistsError)
    unless ``force``, and a symbolic link at ``path`` always (never followed to overwrite the
    file it names)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_TRUNC if force else os.O_EXCL
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def main(argv: Sequence[str]) -> int:
    """``slurmenv dump``: returns the exit status (0 even when resolution fails: it is recorded)."""
    args = build_parser().parse_args(argv)
    data = collect(options=options_from_args(args), probe=args.probe)
    text = json.dumps(data, indent=1, sort_keys=False) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    path = expand_output(args.output, os.environ, data["resolution"].get("summary"))
    try:
        write_new(path, text, args.force)
    except FileExistsError:
        sys.stderr.write(f"slurmenv: error: {path} exists: give another -o, or --force to "
                         "replace it\n")
        return 1
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        sys.stderr.write(f"slurmenv: error: cannot write {path}: {why}\n")
        return 1
    outcome = "error recorded" if "error" in data["resolution"] else "resolved"
    sys.stderr.write(f"slurmenv: wrote {path} ({outcome})\n")
    return 0
