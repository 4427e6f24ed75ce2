"""Slurm node lists and task counts, with Slurm's semantics.

Expansion is python-hostlist's; this module only adds what Slurm does and python-hostlist does
not: whitespace separators (python-hostlist splits at commas only), order and duplicates kept,
and errors that name the variable.

Size limits. Slurm's own parser refuses more than 65,536 names in one range, yet Slurm writes
such ranges: 100,000 consecutive nodes compress to ``n[000000-099999]``, which
``scontrol show hostnames`` cannot read back. python-hostlist refuses more than 100,000 names
per comma-separated part (its ``MAX_SIZE``). slurmenv lifts that cap to :data:`MAX_NODES`
(1,048,576) names for a whole list and refuses a longer list with a clear error. A part over
python-hostlist's cap is expanded by a private instance of python-hostlist whose ``MAX_SIZE``
is ``MAX_NODES``: the shared module's global is never changed (another thread may be using it).
"""

from __future__ import annotations

from itertools import repeat
from types import ModuleType

from .errors import SlurmEnvError, is_number

# slurmenv accepts up to this many names in a whole list (16 times Slurm's range cap).
MAX_NODES = 1_048_576
#: The longest node name accepted: a DNS name's limit (Slurm's names are host names). Longer
#: ones only make every rank's TF_CONFIG entry, and so the work, larger.
MAX_NAME = 253
LIST_FIX = "pass the list exactly as Slurm wrote it, e.g. 'node[01-04],gpu[1-2]'"


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


_LARGE: ModuleType | None = None


def _large_hostlist() -> ModuleType:
    """A private instance of python-hostlist with ``MAX_SIZE = MAX_NODES`` (loaded once, only
    for a part of more than 100,000 names). Setting the shared module's ``MAX_SIZE`` and back
    is not thread-safe; a module of our own needs no lock."""
    global _LARGE
    if _LARGE is None:
        import importlib.util

        spec = importlib.util.find_spec("hostlist")
        assert spec is not None and spec.loader is not None  # hostlist is a dependency
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.MAX_SIZE = MAX_NODES  # type: ignore[attr-defined]
        _LARGE = module
    return _LARGE


def _expand_part(part: str) -> list[str]:
    """python-hostlist's expansion of one part; raises ValueError with its message."""
    import hostlist

    try:
        return list(hostlist.expand_hostlist(part, allow_duplicates=True))
    except hostlist.BadHostlist as exc:
        if "too large" not in str(exc):
            raise ValueError(str(exc)) from None
    large = _large_hostlist()
    try:
        return list(large.expand_hostlist(part, allow_duplicates=True))
    except large.BadHostlist as exc:
        raise ValueError(str(exc)) from None


class NodeList:
    """A Slurm node list, expanded by python-hostlist (all of it: every use counts the names).

    Raises SlurmEnvError naming ``variable`` when the list is malformed, empty or longer than
    :data:`MAX_NODES` names.
    """

    __slots__ = ("_names", "text", "variable")

    def __init__(self, text: str, variable: str) -> None:
        self.text = text
        self.variable = variable
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # bytes that were not UTF-8 (os.environ's surrogateescape)
            raise self._error(" (bytes that are not UTF-8 text)") from None
        parts = _split_parts(text)
        if not parts:
            raise self._error("")
        if len(parts) == 1:
            self._names = self._expand(parts[0])
        else:
            self._names = []
            for part in parts:
                self._names.extend(self._expand(part))
        if len(self._names) > MAX_NODES:
            raise self._error(f" (more than {MAX_NODES} names)")

    def _error(self, detail: str) -> SlurmEnvError:
        return SlurmEnvError(
            f"{self.variable} is not a valid Slurm node list{detail}",
            variable=self.variable, value=self.text, fix=LIST_FIX)

    def _expand(self, part: str) -> list[str]:
        """One part's names, checked."""
        if "[" not in part and "]" not in part:
            if len(part) > MAX_NAME:
                raise self._error(f" (a name longer than {MAX_NAME} characters)")
            return [part]
        if not part.isprintable() or any(char.isspace() for char in part):
            # only inside brackets (separators split the list elsewhere), where
            # python-hostlist would make names ending in a newline
            raise self._error(" (blank or control character inside brackets)")
        try:
            names = _expand_part(part)
        except ValueError as exc:
            too_large = "too large" in str(exc)
            detail = f"more than {MAX_NODES} names" if too_large else str(exc)
            raise self._error(f" ({detail})") from None
        if not names:
            raise self._error(" (empty bracket expression)")
        if len(part) > MAX_NAME and max(map(len, names)) > MAX_NAME:
            raise self._error(f" (a name longer than {MAX_NAME} characters)")
        return names

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, index: int) -> str:
        if index < 0:
            raise IndexError(index)
        return self._names[index]

    def names(self) -> list[str]:
        """Every name, in Slurm's order (duplicates kept)."""
        return self._names


def step_nodes(text: str, count: int) -> NodeList:
    """A step's node list (``SLURM_STEP_NODELIST``), counted against ``SLURM_STEP_NUM_NODES``
    (``count``) and refused when it names a node twice: Slurm lists each node of a step once.
    The one check of every launcher that reads a step's list (srun tasks, the MPI launchers'
    daemon and proxy steps)."""
    listed = NodeList(text, "SLURM_STEP_NODELIST")
    if len(listed) != count:
        raise SlurmEnvError(
            f"SLURM_STEP_NODELIST names {len(listed)} nodes but SLURM_STEP_NUM_NODES={count}",
            variable="SLURM_STEP_NODELIST", value=text,
            fix="these come from the same step; do not set them by hand or mix in job values")
    seen = set(listed.names())
    if len(seen) != len(listed):
        raise SlurmEnvError(
            f"SLURM_STEP_NODELIST names {len(listed)} nodes but only {len(seen)} different ones "
            "(Slurm lists each node of a step once)",
            variable="SLURM_STEP_NODELIST", value=text,
            fix="these come from Slurm; do not set them by hand")
    return listed


def expand(text: str, variable: str) -> list[str]:
    """Expand a Slurm node list (``rack[1-2]-n[01-02],gpu7``) into names, in Slurm's order.

    Duplicates and order are kept; commas, spaces and newlines all separate.
    Raises SlurmEnvError naming ``variable`` when the list is malformed or empty.
    """
    return NodeList(text, variable).names()


def parse_tasks_per_node(text: str, variable: str, most: int = MAX_NODES) -> list[int]:
    """Parse Slurm's compressed task counts (``2(x3),1`` → ``[2, 2, 2, 1]``); refused as soon
    as they list more than ``most`` nodes (the step's node count, when the caller knows it:
    128 KiB of ``2,`` over a 1,000-node step stops after 1,001 entries).

    Every node of a step runs at least one task, so a zero count is an error, as is a
    repetition of zero (``2(x0)``), which python-hostlist would silently turn into nothing.
    """
    counts: list[int] = []
    for part in text.split(","):  # as Slurm writes it: no blank anywhere
        count, paren, repeat_text = part.partition("(x")
        if paren:
            repeat_text, close, rest = repeat_text.partition(")")
            ok = bool(close) and not rest and is_number(repeat_text)
        else:
            repeat_text, ok = "1", True
        if not (ok and is_number(count)) or int(count) == 0 or int(repeat_text) == 0:
            raise SlurmEnvError(
                f"{variable} is not a valid Slurm task count list",
                variable=variable, value=text,
                fix="it must look like '2(x3),1': positive counts, '(xN)' repeats a count N times")
        times = int(repeat_text)
        if len(counts) + times > most and most < MAX_NODES:
            # more nodes than the caller's step has: the caller refuses the length, naming
            # both values; the rest is not read
            counts.extend(repeat(int(count), most + 1 - len(counts)))
            return counts
        if len(counts) + times > MAX_NODES:
            raise SlurmEnvError(
                f"{variable} lists more than {MAX_NODES} nodes",
                variable=variable, value=text,
                fix=f"slurmenv handles steps of up to {MAX_NODES} nodes")
        counts.extend(repeat(int(count), times))
    return counts
