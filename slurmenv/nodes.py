"""Slurm node lists and task counts, with Slurm's semantics.

Expansion is python-hostlist's; this module only adds what Slurm does and python-hostlist does
not: whitespace separators, order and duplicates kept, and errors that name the variable.
"""

from __future__ import annotations

import re

import hostlist

from .errors import SlurmEnvError

_TASKS_PART = re.compile(r"^([0-9]+)(?:\(x([0-9]+)\))?$")
# python-hostlist refuses more than MAX_SIZE names per comma-separated part; Slurm itself caps
# a range at 65,536 names. slurmenv accepts up to this many names in a whole list.
MAX_NODES = 1_048_576


def _parts(text: str) -> list[str]:
    """Split a node list at top-level separators (comma, space, newline), brackets kept."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif depth == 0 and (ch == "," or ch.isspace()):
            if i > start:
                parts.append(text[start:i])
            start = i + 1
    if len(text) > start:
        parts.append(text[start:])
    return parts


def expand(text: str, variable: str) -> list[str]:
    """Expand a Slurm node list (``rack[1-2]-n[01-02],gpu7``) into names, in Slurm's order.

    Duplicates and order are kept; commas, spaces and newlines all separate.
    Raises SlurmEnvError naming ``variable`` when the list is malformed or empty.
    """
    names: list[str] = []
    saved = hostlist.MAX_SIZE
    hostlist.MAX_SIZE = MAX_NODES
    try:
        for part in _parts(text):
            names.extend(hostlist.expand_hostlist(part, allow_duplicates=True))
            if len(names) > MAX_NODES:
                raise hostlist.BadHostlist(f"more than {MAX_NODES} names")
    except hostlist.BadHostlist as exc:
        raise SlurmEnvError(
            f"{variable} is not a valid Slurm node list ({exc})",
            variable=variable,
            value=text,
            fix="pass the list exactly as Slurm wrote it, e.g. 'node[01-04],gpu[1-2]'",
        ) from None
    finally:
        hostlist.MAX_SIZE = saved
    bad = [name for name in names if not name or "[" in name or "]" in name]
    if bad or not names:
        raise SlurmEnvError(
            f"{variable} is not a valid Slurm node list",
            variable=variable,
            value=text,
            fix="pass the list exactly as Slurm wrote it, e.g. 'node[01-04],gpu[1-2]'",
        )
    return names


def parse_tasks_per_node(text: str, variable: str) -> list[int]:
    """Parse Slurm's compressed task counts (``2(x3),1`` → ``[2, 2, 2, 1]``).

    Every node of a step runs at least one task, so a zero count is an error, as is a
    repetition of zero (``2(x0)``), which python-hostlist would silently turn into nothing.
    """
    counts: list[int] = []
    for part in text.strip().split(","):
        match = _TASKS_PART.match(part.strip())
        if match is None or int(match.group(1)) == 0 or match.group(2) in ("0", "00"):
            raise SlurmEnvError(
                f"{variable} is not a valid Slurm task count list",
                variable=variable,
                value=text,
                fix="it must look like '2(x3),1': positive counts, '(xN)' repeats a count N times",
            )
        repeat = int(match.group(2) or 1)
        if repeat == 0 or len(counts) + repeat > MAX_NODES:
            raise SlurmEnvError(
                f"{variable} repeats a count zero or too many times",
                variable=variable,
                value=text,
                fix=f"repetitions must be between 1 and {MAX_NODES}",
            )
        counts.extend([int(match.group(1))] * repeat)
    return counts
