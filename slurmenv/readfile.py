"""The one way slurmenv reads a file that a variable names (``SLURM_HOSTFILE``, a PALS apinfo
file, ``PBS_NODEFILE``, LSF's rank file): a regular file only, of bounded size, opened without
blocking. A variable naming ``/dev/zero``, a FIFO or a directory is refused, never read without
end or waited on."""

from __future__ import annotations

from .errors import SlurmEnvError

#: The largest file read: far above any real one (a host file of a million ranks is ~20 MB).
LIMIT = 1 << 26  # 64 MiB


def read(path: str, variable: str, fix: str, limit: int = LIMIT) -> bytes | None:
    """The content of the regular file ``path`` (named by ``variable``), None when it cannot be
    opened (absent, not readable). Refused (SlurmEnvError naming ``variable``, with ``fix``):
    not a regular file, or larger than ``limit`` bytes."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SlurmEnvError(
                f"{variable} names {path}, which is not a regular file", variable=variable,
                value=path, fix=fix)
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise SlurmEnvError(
                f"{variable} names {path}, larger than {limit} bytes", variable=variable,
                value=path, fix=fix)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_text(path: str, variable: str, fix: str, limit: int = LIMIT) -> str | None:
    """:func:`read` decoded as UTF-8; refused when it is not UTF-8 text."""
    data = read(path, variable, fix, limit)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SlurmEnvError(
            f"{variable} names {path}, which is not UTF-8 text", variable=variable, value=path,
            fix=fix) from None
