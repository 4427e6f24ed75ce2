"""Slurm node lists and task counts, with Slurm's semantics.

Expansion is python-hostlist's; this module only adds what Slurm does and python-hostlist does
not: whitespace separators (python-hostlist splits at commas only), order and duplicates kept,
errors that name the variable, and a :class:`NodeList` that expands one comma-separated part at
a time, when a name in it is asked for: the first name (``MASTER_ADDR``) needs only the first
part.

Size limits. Slurm's own parser refuses more than 65,536 names in one range, yet Slurm writes
such ranges: 100,000 consecutive nodes compress to ``n[000000-099999]``, which
``scontrol show hostnames`` cannot read back. python-hostlist refuses more than 100,000 names
per comma-separated part (its ``MAX_SIZE``). slurmenv lifts that cap to :data:`MAX_NODES`
(1,048,576) names for a whole list and refuses a longer list with a clear error.
"""

from __future__ import annotations

from itertools import repeat

from ._compat import bisect_right
from .errors import SlurmEnvError

# slurmenv accepts up to this many names in a whole list (16 times Slurm's range cap).
MAX_NODES = 1_048_576
LIST_FIX = "pass the list exactly as Slurm wrote it, e.g. 'node[01-04],gpu[1-2]'"


def _is_number(text: str) -> bool:
    return text.isdigit() and text.isascii()


def _split_parts(text: str) -> list[str]:
    """Split a node list at the separators Slurm accepts (commas, blanks, newlines) outside
    brackets. python-hostlist splits at top-level commas only, so the blanks are turned into
    commas here; what is inside brackets is left for python-hostlist to judge."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif depth == 0 and (char == "," or char.isspace()):
            if i > start:
                parts.append(text[start:i])
            start = i + 1
    if len(text) > start:
        parts.append(text[start:])
    return parts


class NodeList:
    """A Slurm node list, expanded by python-hostlist one part at a time, on demand.

    ``nodes[i]`` expands the parts up to the one holding name ``i``; ``len(nodes)`` and
    :meth:`names` expand them all. Raises SlurmEnvError naming ``variable`` when the list is
    malformed, empty or longer than :data:`MAX_NODES` names.
    """

    __slots__ = ("_expanded", "_parts", "_starts", "text", "variable")

    def __init__(self, text: str, variable: str) -> None:
        self.text = text
        self.variable = variable
        self._parts = _split_parts(text)
        if not self._parts:
            raise self._error("")
        self._expanded: list[list[str]] = []
        self._starts: list[int] = [0]

    def _error(self, detail: str) -> SlurmEnvError:
        return SlurmEnvError(
            f"{self.variable} is not a valid Slurm node list{detail}",
            variable=self.variable,
            value=self.text,
            fix=LIST_FIX,
        )

    def _expand_next(self) -> None:
        """Expand the next part with python-hostlist and check its names."""
        part = self._parts[len(self._expanded)]
        if "[" in part or "]" in part:
            import hostlist

            if not part.isprintable() or any(char.isspace() for char in part):
                # only inside brackets (separators split the list elsewhere), where
                # python-hostlist would make names ending in a newline
                raise self._error(" (blank or control character inside brackets)")
            saved = hostlist.MAX_SIZE
            hostlist.MAX_SIZE = MAX_NODES  # python-hostlist caps one part at 100,000 names
            try:
                names = hostlist.expand_hostlist(part, allow_duplicates=True)
            except hostlist.BadHostlist as exc:
                too_large = "too large" in str(exc)
                detail = f"more than {MAX_NODES} names" if too_large else str(exc)
                raise self._error(f" ({detail})") from None
            finally:
                hostlist.MAX_SIZE = saved
            if not names:
                raise self._error(" (empty bracket expression)")
        else:
            names = [part]
        total = self._starts[-1] + len(names)
        if total > MAX_NODES:
            raise self._error(f" (more than {MAX_NODES} names)")
        self._expanded.append(names)
        self._starts.append(total)

    def __len__(self) -> int:
        while len(self._expanded) < len(self._parts):
            self._expand_next()
        return self._starts[-1]

    def __getitem__(self, index: int) -> str:
        """The name at ``index`` (``0 <= index < len``), expanding only the parts up to it."""
        if index < 0:
            raise IndexError(index)
        while self._starts[-1] <= index:
            if len(self._expanded) == len(self._parts):
                raise IndexError(index)
            self._expand_next()
        k = bisect_right(self._starts, index) - 1
        return self._expanded[k][index - self._starts[k]]

    def names(self) -> list[str]:
        """Every name, in Slurm's order (duplicates kept)."""
        len(self)
        if len(self._expanded) == 1:
            return self._expanded[0]
        return [name for names in self._expanded for name in names]


def expand(text: str, variable: str) -> list[str]:
    """Expand a Slurm node list (``rack[1-2]-n[01-02],gpu7``) into names, in Slurm's order.

    Duplicates and order are kept; commas, spaces and newlines all separate.
    Raises SlurmEnvError naming ``variable`` when the list is malformed or empty.
    """
    return NodeList(text, variable).names()


def parse_tasks_per_node(text: str, variable: str) -> list[int]:
    """Parse Slurm's compressed task counts (``2(x3),1`` → ``[2, 2, 2, 1]``).

    Every node of a step runs at least one task, so a zero count is an error, as is a
    repetition of zero (``2(x0)``), which python-hostlist would silently turn into nothing.
    """
    counts: list[int] = []
    for part in text.strip().split(","):
        count, paren, repeat_text = part.strip().partition("(x")
        if paren:
            repeat_text, close, rest = repeat_text.partition(")")
            ok = bool(close) and not rest and _is_number(repeat_text)
        else:
            repeat_text, ok = "1", True
        if not (ok and _is_number(count)) or int(count) == 0 or int(repeat_text) == 0:
            raise SlurmEnvError(
                f"{variable} is not a valid Slurm task count list",
                variable=variable,
                value=text,
                fix="it must look like '2(x3),1': positive counts, '(xN)' repeats a count N times",
            )
        times = int(repeat_text)
        if len(counts) + times > MAX_NODES:
            raise SlurmEnvError(
                f"{variable} lists more than {MAX_NODES} nodes",
                variable=variable,
                value=text,
                fix=f"slurmenv handles steps of up to {MAX_NODES} nodes",
            )
        counts.extend(repeat(int(count), times))
    return counts
