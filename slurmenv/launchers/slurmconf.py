"""Slurm's configuration-file grammar, read as Slurm 26.05's ``src/common/parse_config.c`` reads
``slurm.conf``, ``topology.conf`` and the files they include, or refused.

The rules, each from the C function named:

* a file is read line by line as ``fgets`` does (a line ends after ``\\n``);
  ``_strip_comments`` cuts a physical line at the first ``#`` preceded by an even number of
  backslashes; ``_strip_continuation`` joins the next line when the (comment-free) line ends
  in an odd number of backslashes followed by blanks, dropping the last backslash and the
  blanks; ``_strip_escapes`` then drops every backslash of the joined line and keeps the byte
  after it (``\\\\`` gives ``\\``, ``\\#`` gives ``#``);
* ``_parse_include_directive``: a line beginning with ``include`` (any case) and a C blank is
  an include; the file name runs to the next blank; ``%c`` becomes the ``ClusterName`` read
  so far, in lower case; a relative name is taken beside ``SLURM_CONF`` (``get_extra_conf_path``),
  never beside the including file; a name with ``*`` is not read by Slurm;
* any other line is one statement: ``keyvalue_pattern`` (a POSIX regular expression)
  ``^[[:space:]]*([[:alnum:]_.]+)[[:space:]]*([-*+/]?)=[[:space:]]*(("([^"]*)")|([^[:space:]]+))([[:space:]]|$)``:
  a key (compared without case), an optional operator, and a value, quoted (blanks allowed,
  the quotes dropped) when a blank or the end follows the closing quote, else the run of
  non-blanks. A line key (``NodeName``, ``PartitionName``, ``SwitchName``...) reads the rest of
  its line as more such pairs (``s_p_parse_line``); a plain key must be alone on its line.
  A key given twice keeps its last value ("specified more than once, latest value used").

"Blank" is C's ``isspace`` (space, ``\\t``, ``\\n``, ``\\v``, ``\\f``, ``\\r``), never Python's
``str.split()``. Refused (:class:`Refused`, the same in every task): a NUL byte anywhere (C
stops at it), a byte outside printable ASCII and those blanks outside comments (the C locale
and a UTF-8 one classify them differently), a line Slurm would not parse, an include Slurm
reads past its line's end (no blank after the name: undefined behaviour in C), and more than
:data:`MAX_FILES` files or :data:`MAX_BYTES` bytes. ``tests/test_slurmconf.py`` checks the
reading against Slurm's own ``s_p_parse_file`` (the built release's ``libslurm.so``).
"""

from __future__ import annotations

import re

from .. import readfile as files
from ..lean import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Iterator

#: C's isspace in every locale for ASCII bytes.
BLANKS = b" \t\n\v\f\r"
#: Files read at most for one configuration (the file and its includes, nested or not).
MAX_FILES = 16
#: Bytes read at most for one configuration, all its files together: a slurm.conf of 40,000
#: NodeName lines of 100 bytes. Reading costs about 2 us a line, 2 s at worst.
MAX_BYTES = 4 << 20
#: Physical lines one logical line may join at most (Slurm has no limit; a real file joins a
#: few).
MAX_CONTINUED = 10_000
#: The bytes a statement may hold: printable ASCII and the blanks.
_TEXT = bytes(range(0x20, 0x7F)) + BLANKS
_VALUE = re.compile(rb"[^ \t\n\v\f\r]+")
_HEAD = re.compile(rb"[ \t\n\v\f\r]*([A-Za-z0-9_.]+)[ \t\n\v\f\r]*([-*+/]?)=[ \t\n\v\f\r]*")


#: Longest path Slurm opens (PATH_MAX); a longer Include name is refused.
PATH_MAX = 4096


def shown(text: str | bytes, most: int = 80) -> str:
    """``text`` for a message: stripped, at most ``most`` characters (a line of a file can be
    megabytes long; a refusal stays one short line)."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    text = text.strip()
    return repr(text if len(text) <= most else text[:most] + "...")


class Refused(ValueError):
    """A form slurmenv does not read exactly as Slurm does (or one Slurm rejects); the message
    names the file, the line and what is wrong."""


class Pair(NamedTuple):
    """One ``key=value`` of a line: the key as written, its operator (``""``, ``+``, ``-``,
    ``*`` or ``/``) and the value (quotes dropped)."""

    key: str
    op: str
    value: str


class Statement:
    """One line of a file: its first pair, the line and where the first pair ends (for
    :meth:`rest`), and where it is (``file line N``)."""

    __slots__ = ("end", "first", "line", "number", "path")

    def __init__(self, first: Pair, line: bytes, end: int, path: str, number: int) -> None:
        self.first, self.line, self.end, self.path, self.number = first, line, end, path, number

    @property
    def where(self) -> str:
        return f"{self.path} line {self.number}"

    def alone(self) -> bool:
        """Whether the first pair is alone on its line, as a plain key must be."""
        return _blank(self.line[self.end:])

    def rest(self) -> Iterator[Pair]:
        """``s_p_parse_line``: the pairs after the first, one at a time (a line of millions
        of pairs is never held as a list); Refused when the line then holds more than
        blanks (Slurm: "Parse error")."""
        start = self.end
        while (match := pair(self.line, start)) is not None:
            yield match[0]
            start = match[1]
        if not _blank(self.line[start:]):
            raise Refused(f"{self.where} holds more than key=value pairs, which Slurm does "
                          f"not parse: {shown(self.line[start:])}")


# -- lines -----------------------------------------------------------------------------------
def _strip_comment(piece: bytes) -> bytes:
    """``_strip_comments``: cut at the first ``#`` after an even number of backslashes."""
    hash_at = piece.find(b"#")
    if hash_at < 0:
        return piece
    if b"\\" not in piece[:hash_at]:
        return piece[:hash_at]
    run = 0
    for i, byte in enumerate(piece):
        if byte == 0x23 and run % 2 == 0:
            return piece[:i]
        run = run + 1 if byte == 0x5C else 0
    return piece


def _continued(piece: bytes) -> bytes | None:
    """``_strip_continuation``: the piece without its last backslash and the blanks after it
    when it ends in an odd number of backslashes (then blanks); None when it does not."""
    end = len(piece.rstrip(BLANKS))
    start = len(piece[:end].rstrip(b"\\"))
    count = end - start
    if count % 2 == 0:
        return None
    return piece[:end - 1]


def _strip_escapes(line: bytes) -> bytes:
    """``_strip_escapes``: every backslash dropped, the byte after it kept."""
    if b"\\" not in line:
        return line
    out = bytearray()
    i = 0
    while i < len(line):
        if line[i] == 0x5C:
            i += 1
            if i == len(line):  # C copies the terminating NUL: the line ends here
                break
        out.append(line[i])
        i += 1
    return bytes(out)


def logical_lines(data: bytes, name: str) -> Iterator[tuple[int, bytes]]:
    """``_get_next_line``: each logical line of ``data`` (file ``name``) and the number of its
    first physical line, comments, continuations and escapes done, empty ones included. A
    physical line keeps its ``\n`` unless a comment cut it off or it is the file's last.
    Refused: a line continued over more than :data:`MAX_CONTINUED` lines."""
    import io

    if b"\0" in data:
        raise Refused(f"{name} holds a NUL byte (Slurm stops reading a line there)")
    physical = io.BytesIO(data)  # one line at a time, "\n" kept: fgets
    if b"\\" not in data:  # no continuation, no escape, a comment at the first #
        for number, raw in enumerate(physical, 1):
            if raw.isspace():  # ASCII blanks, C's: a line Slurm passes over
                continue
            cut = raw.find(b"#")
            yield number, _checked(raw[:cut] if cut >= 0 else raw, name, number)
        return
    number = 0
    joined: list[bytes] = []
    for raw in physical:
        number += 1
        piece = _strip_comment(raw)
        kept = _continued(piece)
        if kept is None:
            joined.append(piece)
            first = number + 1 - len(joined)
            yield first, _checked(_strip_escapes(b"".join(joined)), name, first)
            joined = []
        elif len(joined) == MAX_CONTINUED:
            raise Refused(f"{name} line {number - len(joined)} is continued over more than "
                          f"{MAX_CONTINUED} lines")
        else:
            joined.append(kept)
    if joined:  # continued at the end of the file
        first = number + 1 - len(joined)
        yield first, _checked(_strip_escapes(b"".join(joined)), name, first)


def _checked(line: bytes, name: str, number: int) -> bytes:
    if line.translate(None, _TEXT):
        raise Refused(f"{name} line {number} holds a byte that is not printable ASCII or a "
                      "blank, outside a comment (Slurm's reading of it depends on the locale)")
    return line


# -- pairs -----------------------------------------------------------------------------------
def pair(line: bytes, start: int = 0) -> tuple[Pair, int] | None:
    """``keyvalue_pattern`` matched at ``line[start:]``: the pair and where its value ends,
    or None when it does not match."""
    head = _HEAD.match(line, start)
    if head is None:
        return None
    i = head.end()
    if i == len(line):
        return None
    if line[i] == 0x22:  # '"': quoted when the closing quote is followed by a blank or the end
        close = line.find(b'"', i + 1)
        if close >= 0 and (close + 1 == len(line) or line[close + 1] in BLANKS):
            value, end = line[i + 1:close], close + 1
            return Pair(head[1].decode(), head[2].decode(), value.decode()), end
    end = _VALUE.match(line, i).end()  # type: ignore[union-attr]  # line[i] is no blank
    return Pair(head[1].decode(), head[2].decode(), line[i:end].decode()), end


def _blank(text: bytes) -> bool:
    return not text.strip(BLANKS)


# -- files -----------------------------------------------------------------------------------
class Reader:
    """The statements of one configuration file and those it includes, in Slurm's order
    (an include is read where it stands). ``conf`` is ``SLURM_CONF`` (relative includes are
    taken beside it); ``variable`` names it in refusals; ``cluster_key``: the file's table has
    ``ClusterName`` (slurm.conf), which ``%c`` in an include stands for."""

    def __init__(self, conf: str, variable: str, cluster_key: bool) -> None:
        self.conf = conf
        self.variable = variable
        self.cluster_key = cluster_key
        self.cluster: str | None = None
        self.files = 0
        self.left = MAX_BYTES

    def statements(self, path: str) -> Iterator[Statement]:
        self.files += 1
        if self.files > MAX_FILES:
            raise Refused(f"{self.conf} and its includes are more than {MAX_FILES} files")
        data = files.read(path, self.variable, f"make {path} a readable regular file",
                          self.left)
        if data is None:
            raise Refused(f"{path} cannot be read here")
        self.left -= len(data)
        yield from self.text_statements(data, path)

    def text_statements(self, data: bytes, path: str) -> Iterator[Statement]:
        for number, line in logical_lines(data, path):
            if not line:
                continue
            if line[:7].lower() == b"include":
                target = self._include(line, f"{path} line {number}")
                if target is not None:
                    yield from self.statements(target)
                    continue
            match = pair(line)
            if match is None:
                if _blank(line):
                    continue
                raise Refused(f"{path} line {number} is not key=value, which Slurm does not "
                              f"read: {shown(line)}")
            first, end = match
            if self.cluster_key and first.key.lower() == "clustername":
                self.cluster = first.value
            yield Statement(first, line, end, path, number)

    def _include(self, line: bytes, where: str) -> str | None:
        """``_parse_include_directive``: the path an include line names, None for another
        line."""
        if line[:7].lower() != b"include" or len(line) == 7 or line[7] not in BLANKS:
            return None
        start = 7
        while start < len(line) and line[start] in BLANKS:
            start += 1
        name_run = _VALUE.match(line, start)  # the run of non-blanks, None at the end
        stop = name_run.end() if name_run is not None else start
        if stop == len(line):
            # C scans on past the end of the line for a blank (undefined behaviour)
            raise Refused(f"{where}: an Include whose file name is not followed by a blank "
                          "on its line (Slurm reads past the line's end); end the line with a "
                          "newline and no comment right after the name")
        if not _blank(line[stop:]):
            raise Refused(f"{where}: an Include line with more than a file name")
        name = line[start:stop].decode()
        if len(name) > PATH_MAX:
            raise Refused(f"{where}: an Include name longer than {PATH_MAX}: {shown(name)}")
        if "%c" in name:
            if self.cluster is None or "%" in self.cluster:
                raise Refused(f"{where}: Include {name} needs a ClusterName set before it "
                              "(without %)")
            name = name.replace("%c", self.cluster.lower())
            if "%c" in name:  # Slurm would replace the %c the replacement made
                raise Refused(f"{where}: Include with %c that ClusterName does not resolve")
        if "*" in name:
            raise Refused(f"{where}: Include {name} is a glob, which Slurm does not read")
        if name.startswith("/"):
            return name
        folder = self.conf[:self.conf.rfind("/") + 1]
        if not folder:
            raise Refused(f"{where}: a relative Include while {self.variable} is a relative "
                          "path")
        return folder + name


def settings(conf: str, keys: tuple[str, ...], variable: str = "SLURM_CONF") -> dict[str, str]:
    """The values of the global ``keys`` (lower case) in slurm.conf at ``conf`` and its
    includes, the last one of each; a statement of another key (a global one, or a line key
    such as ``PartitionName`` with its own ``SelectTypeParameters=``) is not read further.
    Refused: anything :class:`Reader` refuses, a line Slurm would not parse, and a wanted key
    with an operator (``+=``) or with more on its line."""
    found: dict[str, str] = {}
    reader = Reader(conf, variable, cluster_key=True)
    for statement in reader.statements(conf):
        key = statement.first.key.lower()
        if key not in keys:
            continue
        if statement.first.op or not statement.alone():
            raise Refused(f"{statement.where}: {statement.first.key} with an operator or "
                          "more on its line")
        found[key] = statement.first.value
    return found
