"""Writing a dump: what this task reads (:func:`collect`), where (:func:`expand_output`:
srun-style ``%j``/``%N``/... names that stay in their directory) and how (:func:`write_new`: a
new file, never through a symbolic link, an existing one only with ``--force``).
"""

from __future__ import annotations

import datetime
import os
import re
import socket
from collections.abc import Callable, Mapping
from typing import Any

from .. import __version__, resolve
from ..errors import SlurmEnvError
from ..launchers import apinfo, base, evidence
from ..resolution import Resolution
from .allowlist import FILE_VARIABLES, select
from .probe import cpus
from .secrets import scrub

#: A dump file says it is one, and of which format, under FORMAT_KEY (load refuses others).
FORMAT = 1
FORMAT_KEY = "slurmenv_dump"
DEFAULT_OUTPUT = "slurmenv-dump-%j.%s.%t.json"


def expand_output(pattern: str, environ: Mapping[str, str],
                  resolved: Mapping[str, Any] | None = None) -> str:
    """srun-style file name patterns: %j job, %s step, %t rank, %n node index, %N host, %%;
    rank and node index from ``resolved`` (``to_dict()``) when known: an MPI rank's
    SLURM_PROCID is a daemon step's, the same in several ranks."""
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
    """``value`` as a piece of a file name that stays in its directory (letters, digits,
    ``._-``; never ``.`` or ``..``; at most 64 characters): ``SLURMD_NODENAME=../../x`` too."""
    text = re.sub(r"[^A-Za-z0-9._-]", "_", value)[:64]
    return "_" if text.strip(".") == "" else text


def error_dict(exc: SlurmEnvError) -> dict[str, Any]:
    """A resolution error as a dump records it (and a replay compares it)."""
    return {"error": exc.message, "variable": exc.variable, "value": exc.value, "fix": exc.fix}


def record(res: Resolution) -> dict[str, Any]:
    """What a replay must reproduce: ``to_dict()``, the variables, and the whole layout."""
    data: dict[str, Any] = {"summary": res.to_dict()}
    try:
        data["env"] = res.env("all")
    except SlurmEnvError as exc:
        data["env"] = error_dict(exc)
    try:
        data["layout"] = {
            "hosts": list(res.hosts), "node_of": list(res.node_of), "local_of": list(res.local_of)
        }
    except SlurmEnvError as exc:
        data["layout"] = error_dict(exc)
    return data


#: The largest file a dump records (a host file of a million ranks is about 20 MB).
FILE_LIMIT = 1 << 25
#: Where no file a variable documents lives: the kernel's pseudo-files and devices
#: (``SLURM_HOSTFILE=/proc/self/environ`` would copy the whole environment into the dump).
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")
NOT_RECORDED = "not-recorded-in-the-dump"


def unrecorded_path(name: str) -> str:
    """Where ``name`` points, in the recorded resolution and a replay, when the dump holds no
    copy of its file: under ``/proc``, where no one creates a file, the same on every machine."""
    return f"/proc/{NOT_RECORDED}/{name.lower()}"


def _on_pseudo_filesystem(path: str) -> bool:
    """Whether ``path`` (symbolic links resolved) is under :data:`PSEUDO_ROOTS`, or on the
    same file system as one of them (``/proc`` mounted elsewhere too)."""
    real = os.path.realpath(path)
    if any(real == root or real.startswith(root + "/") for root in PSEUDO_ROOTS):
        return True
    try:
        device = os.stat(real).st_dev
    except (OSError, ValueError):
        return True  # gone or unreadable since: nothing to record
    for root in PSEUDO_ROOTS:
        try:  # only a mount point's device: a plain /dev directory shares the root's
            if os.path.ismount(root) and os.stat(root).st_dev == device:
                return True
        except OSError:
            continue
    return False


def _hosts(name: str, data: bytes) -> None:
    """A host file (``SLURM_HOSTFILE``, ``PBS_NODEFILE``, ``LSB_DJOB_RANKFILE``) read as the
    resolver reads ``SLURM_HOSTFILE`` (:func:`nodes.expand`), every name a host name."""
    from .. import nodes
    from ..errors import host_problem  # the resolver's one rule: a line with =, a blank... is none

    listed = nodes.expand(data.decode("utf-8"), name)
    bad = next((host for host in listed if host_problem(host) is not None), None)
    if bad is not None:
        raise SlurmEnvError(f"{name} names {bad!r}, no host name", variable=name)


#: How each variable of FILE_VARIABLES' file is checked to be what the variable documents
#: (raises SlurmEnvError or UnicodeDecodeError when it is not): the resolver's own readers.
FILE_CHECKS: dict[str, Callable[[str, bytes], object]] = {
    "SLURM_HOSTFILE": _hosts, "PBS_NODEFILE": _hosts, "LSB_DJOB_RANKFILE": _hosts,
    "PALS_APINFO": lambda name, data: apinfo.parse(data, name)}  # as the PALS launcher does


def _printable_runs(data: bytes) -> list[str]:
    """The pieces of ``data`` between control characters and non-ASCII bytes (its lines, and
    the strings of a binary file)."""
    return [run.decode("ascii") for run in re.split(rb"[\x00-\x1f\x7f-\xff]+", data) if run]


def _why_not_kept(name: str, path: str, data: bytes) -> str | None:
    """Why the file ``path`` named by ``name`` is not recorded (None: kept): not what the
    variable documents (:data:`FILE_CHECKS`), or a line that looks like a credential."""
    try:
        FILE_CHECKS[name](name, data)
    except (SlurmEnvError, UnicodeDecodeError):
        return f"the file {name} names is not what {name} documents"
    if any(base.looks_like_credential(run) for run in _printable_runs(data)):
        return f"the file {name} names holds a line that looks like a credential"
    return None


def _read_files(environ: Mapping[str, str]
                ) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(text files, binary files base64, why others were not recorded) of
    :data:`FILE_VARIABLES`."""
    import base64

    from .. import readfile as files

    text: dict[str, str] = {}
    binary: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name in FILE_VARIABLES:
        path = environ.get(name)
        if not path:
            continue
        if _on_pseudo_filesystem(path):  # before reading: a read there can do anything
            skipped[name] = f"{name} names a file under {', '.join(PSEUDO_ROOTS)}"
            continue
        try:
            data = files.read(path, name, "", limit=FILE_LIMIT)
        except SlurmEnvError:  # not a regular file, or too large: not recorded
            skipped[name] = f"{name} names no regular file of at most {FILE_LIMIT} bytes"
            continue
        if data is None:
            continue
        why = _why_not_kept(name, path, data)
        if why is not None:
            skipped[name] = why
            continue
        try:
            if b"\0" not in data:
                text[name] = data.decode("utf-8")
                continue
        except UnicodeDecodeError:
            pass
        binary[name] = base64.b64encode(data).decode("ascii")
    return text, binary, skipped


def collect(environ: Mapping[str, str] | None = None, options: Mapping[str, Any] | None = None,
            probe: bool = False) -> dict[str, Any]:
    """Build a dump of this task (``environ`` defaults to ``os.environ``)."""
    from .. import ports

    env = os.environ if environ is None else environ
    opts = {k: v for k, v in (options or {}).items() if v is not None}
    ephemeral = ports.ephemeral_range()
    data: dict[str, Any] = {
        FORMAT_KEY: FORMAT,
        "slurmenv_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "ephemeral_range": list(ephemeral) if ephemeral else None,
        "cpu_affinity": cpus()["affinity"],  # thread counts follow it when -c was not given
        "options": opts,
        "environ": select(env),
    }
    data["files"], data["binary_files"], skipped = _read_files(env)
    if skipped:
        data["files_not_recorded"] = skipped
    data["step_evidence"] = found = evidence.find()
    # a launcher started inside another (torchrun's agent in an srun task) shows itself only in
    # this machine's processes: record what the world guard would find, for the replay
    from ..launchers import modules

    agents = tuple(name for module in modules() for name in getattr(module, "AGENTS", ()))
    data["enclosure"] = enclosed = evidence.agent_ancestor(agents)
    # The resolution recorded reads only the files recorded: an error quoting a file kept out
    # (its lines, its size) would copy it into the dump all the same.
    seen = {**env, **{name: unrecorded_path(name) for name in skipped}} if skipped else env
    try:
        data["resolution"] = record(resolve(seen, ephemeral_range=ephemeral, step_evidence=found,
                                            enclosure=enclosed, **opts))
    except SlurmEnvError as exc:
        data["resolution"] = error_dict(exc)
    if probe:
        from .probe import probe as probe_node

        data["probe"] = probe_node(env, options=opts)
    return scrub(data, env)  # the one filter over the whole record (secrets.py)


#: A dump is readable by its owner only: it holds the job's layout and names.
MODE = 0o600


def write_new(path: str, text: str, force: bool = False) -> None:
    """Write ``text`` to a new file ``path``, mode 0600: an existing file is refused
    (FileExistsError) unless ``force`` (then made 0600 first), a symbolic link always."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_TRUNC if force else os.O_EXCL
    fd = os.open(path, flags, MODE)
    try:
        os.fchmod(fd, MODE)  # a replaced file keeps its mode otherwise
    except OSError:
        os.close(fd)
        raise
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)

