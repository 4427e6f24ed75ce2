"""Slurm's own configuration parser (``s_p_parse_file`` in a built release's ``libslurm.so``),
called through ctypes: the oracle tests/test_slurmconf.py compares slurmenv's reader with.

The tables mirror Slurm's: plain keys as ``S_P_STRING`` (``read_config.c``), and line keys
(``PartitionName``, ``NodeName``, ``SwitchName``, ``BlockName``) as ``S_P_ARRAY`` with a handler
that does what Slurm's ``_parse_switches`` and ``_parse_block`` do: ``s_p_parse_line`` over the
rest of the line with the key's own sub-table, whose values are recorded here.
``get_extra_conf_path`` reads ``SLURM_CONF`` from the environment, which :func:`parse` sets.

Never give it an include of a missing file (Slurm retries for 60 s) or an include line whose
name is not followed by a blank (Slurm reads past the line's end).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from slurm_harness import SLURM_PREFIX

S_P_STRING, S_P_ARRAY = 1, 7
HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                           ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                           ctypes.POINTER(ctypes.c_void_p))


class Option(ctypes.Structure):
    """``s_p_options_t``."""

    _fields_ = [("key", ctypes.c_char_p), ("type", ctypes.c_int), ("handler", HANDLER),
                ("destroy", ctypes.c_void_p), ("line_options", ctypes.c_void_p),
                ("pack", ctypes.c_void_p), ("unpack", ctypes.c_void_p)]


def library(release: str = "26.05.3") -> ctypes.CDLL | None:
    path = SLURM_PREFIX / release / "lib" / "libslurm.so"
    if not (SLURM_PREFIX / release / ".built").exists() or not path.exists():
        return None
    lib = ctypes.CDLL(str(path))
    lib.slurm_s_p_hashtbl_create.restype = ctypes.c_void_p
    lib.slurm_s_p_hashtbl_create.argtypes = [ctypes.c_void_p]
    lib.slurm_s_p_parse_file.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                                         ctypes.c_uint32, ctypes.c_char_p]
    lib.slurm_s_p_parse_line.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                         ctypes.POINTER(ctypes.c_void_p)]
    lib.slurm_s_p_get_string.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p,
                                         ctypes.c_void_p]
    return lib


def _table(options: list[tuple[str, int, object]]) -> ctypes.Array[Option]:
    null = HANDLER()
    array = (Option * (len(options) + 1))()
    for i, (key, kind, handler) in enumerate(options):
        array[i].key = key.encode()
        array[i].type = kind
        array[i].handler = handler if handler is not None else null  # type: ignore[assignment]
    return array


class Parsed:
    """What Slurm read: ``ok`` (s_p_parse_file succeeded), the plain keys' values, and the line
    keys' records in file order: (line key as Slurm's table names it, value, sub-values)."""

    def __init__(self) -> None:
        self.ok = False
        self.values: dict[str, str] = {}
        self.records: list[tuple[str, str, dict[str, str]]] = []


def parse(lib: ctypes.CDLL, path: Path, plain: tuple[str, ...],
          lines: dict[str, tuple[str, ...]]) -> Parsed:
    """Parse ``path`` with a table of the ``plain`` keys and the ``lines`` keys (each with its
    sub-keys), as Slurm's daemons do (flags 0), ``SLURM_CONF`` set to ``path``."""
    parsed = Parsed()
    keep: list[object] = []

    def handler_for(line_key: str, sub_keys: tuple[str, ...]) -> object:
        sub_table = _table([(key, S_P_STRING, None) for key in sub_keys])
        keep.append(sub_table)

        def handle(data, kind, key, value, line, leftover):  # type: ignore[no-untyped-def]
            table = lib.slurm_s_p_hashtbl_create(ctypes.addressof(sub_table))
            lib.slurm_s_p_parse_line(table, leftover[0], leftover)
            subs = {}
            for sub in sub_keys:
                out = ctypes.c_char_p()
                if lib.slurm_s_p_get_string(ctypes.byref(out), sub.encode(), table):
                    subs[sub.lower()] = (out.value or b"").decode("latin-1")
            parsed.records.append((line_key, value.decode("latin-1"), subs))
            data[0] = ctypes.cast(sub_table, ctypes.c_void_p)  # any non-NULL pointer
            return 1

        callback = HANDLER(handle)
        keep.append(callback)
        return callback

    options: list[tuple[str, int, object]] = [(key, S_P_STRING, None) for key in plain]
    options += [(key, S_P_ARRAY, handler_for(key, subs)) for key, subs in lines.items()]
    table_options = _table(options)
    table = lib.slurm_s_p_hashtbl_create(ctypes.addressof(table_options))
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(path)
    try:
        parsed.ok = lib.slurm_s_p_parse_file(table, None, str(path).encode(), 0, None) == 0
    finally:
        if before is None:
            del os.environ["SLURM_CONF"]
        else:
            os.environ["SLURM_CONF"] = before
    for key in plain:
        out = ctypes.c_char_p()
        if lib.slurm_s_p_get_string(ctypes.byref(out), key.encode(), table):
            parsed.values[key.lower()] = (out.value or b"").decode("latin-1")
    # the tables are left to leak: their array data points at our own memory
    return parsed


def hostlist(lib: ctypes.CDLL, expression: str, most: int = 200_000) -> list[str] | None:
    """Slurm's expansion of a node list (``hostlist_create``, then ``hostlist_shift``); None
    when Slurm refuses it (or it holds more than ``most`` names)."""
    lib.slurm_hostlist_create.restype = ctypes.c_void_p
    lib.slurm_hostlist_create.argtypes = [ctypes.c_char_p]
    lib.slurm_hostlist_count.argtypes = [ctypes.c_void_p]
    lib.slurm_hostlist_shift.restype = ctypes.c_void_p
    lib.slurm_hostlist_shift.argtypes = [ctypes.c_void_p]
    lib.slurm_hostlist_destroy.argtypes = [ctypes.c_void_p]
    created = lib.slurm_hostlist_create(expression.encode())
    if not created:
        return None
    try:
        if lib.slurm_hostlist_count(created) > most:
            return None
        names = []
        while name := lib.slurm_hostlist_shift(created):
            names.append(ctypes.string_at(name).decode("latin-1"))
            ctypes.CDLL(None).free(ctypes.c_void_p(name))
        return names
    finally:
        lib.slurm_hostlist_destroy(created)
