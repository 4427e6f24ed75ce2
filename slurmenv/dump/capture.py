"""Writing a dump: what this task reads (:func:`collect`), where (:func:`expand_output`:
srun-style ``%j``/``%N``/... names that stay in their directory) and how (:func:`write_new`: a
new file, never through a symbolic link, an existing one only with ``--force``).
"""

from __future__ import annotations

import datetime
import os
import re
import socket
from collections.abc import Mapping
from typing import Any

from .. import __version__, resolve
from ..errors import SlurmEnvError
from ..resolution import Resolution
from .allowlist import FILE_VARIABLES, select

#: A dump file says it is one, and of which format, under FORMAT_KEY (load refuses others).
FORMAT = 1
FORMAT_KEY = "slurmenv_dump"
DEFAULT_OUTPUT = "slurmenv-dump-%j.%s.%t.json"


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


def _affinity() -> int | None:
    """How many CPUs this task may run on (thread counts follow it when -c was not given)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    return len(getaffinity(0)) if getaffinity is not None else None


#: The largest file a dump records (a host file of a million ranks is about 20 MB).
FILE_LIMIT = 1 << 25


def _read_files(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(text files, binary files base64) named by :data:`FILE_VARIABLES` and readable here."""
    import base64

    text: dict[str, str] = {}
    binary: dict[str, str] = {}
    for name in FILE_VARIABLES:
        path = environ.get(name)
        if not path:
            continue
        from .. import files

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
        "cpu_affinity": _affinity(),
        "options": opts,
        "environ": select(env),
    }
    data["files"], data["binary_files"] = _read_files(env)
    from ..launchers import evidence

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
        data["resolution"] = error_dict(exc)
    if probe:
        from ..doctor.probe import probe as probe_node

        data["probe"] = probe_node(env, options=opts)
    return data


def write_new(path: str, text: str, force: bool = False) -> None:
    """Write ``text`` to a new file ``path``: an existing file is refused (FileExistsError)
    unless ``force``, and a symbolic link at ``path`` always (never followed to overwrite the
    file it names)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_TRUNC if force else os.O_EXCL
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)

