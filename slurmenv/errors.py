"""The one exception slurmenv raises: it names the variable, its value and the fix."""

from __future__ import annotations

from .lean import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

_MAX_SHOWN = 200


def _shorten(value: str) -> str:
    if len(value) <= _MAX_SHOWN:
        return value
    return f"{value[:_MAX_SHOWN]}... ({len(value)} characters)"


class SlurmEnvError(Exception):
    """Resolution failed: nothing was (or may be) exported.

    ``variable`` is the environment variable (or option) at fault, ``value`` what it held
    (``None`` when it was missing) and ``fix`` one sentence telling the user what to do.
    """

    def __init__(self, message: str, *, variable: str | None = None, value: str | None = None,
                 fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.variable = variable
        self.value = value
        self.fix = fix

    def __str__(self) -> str:
        lines = [self.message]
        if self.variable is not None:
            shown = "(unset)" if self.value is None else repr(_shorten(self.value))
            lines.append(f"  variable: {self.variable}={shown}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


def require_list(value: object, parameter: str, what: str) -> None:
    """A TypeError when a string (or one mapping) is given where a list is meant: iterating it
    would take its characters (or keys) for the entries. ``what`` says what to pass."""
    if isinstance(value, (str, bytes)) or hasattr(value, "keys"):
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise TypeError(f"{parameter} must be {what}, not the {type(value).__name__} {shown}")


def require(environ: Mapping[str, str], name: str, fix: str) -> str:
    """Return ``environ[name]`` or raise a SlurmEnvError that says it is missing."""
    value = environ.get(name)
    if value is None or value == "":
        raise SlurmEnvError(f"{name} is not set", variable=name, value=value, fix=fix)
    return str(value)


def printable(text: str) -> str:
    """``text`` for a terminal: control characters (an escape sequence in a variable would
    move the cursor, recolour or retitle the terminal) written as ``\\xNN``; newlines and
    tabs kept. The one rule for every human-readable output (show, doctor, error messages)."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() or char in "\n\t" else
        (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")
        for char in text)


#: The most digits a number slurmenv reads may have: every count, ID, rank and port Slurm and
#: the launchers write fits (a 64-bit value has at most 20), and ``int()`` never meets Python's
#: 4,300-digit limit or the quadratic cost below it.
MAX_DIGITS = 20


def is_number(text: str) -> bool:
    """ASCII decimal digits only, at most :data:`MAX_DIGITS` of them, and no leading zero
    (``0`` itself excepted): the one test of every number slurmenv reads. Nothing is
    stripped: no launcher writes a sign, a blank, a line break or a leading zero, so ``' 1'``,
    ``'01'``, ``'1\\n'`` and ``'+1'`` are refused, not read as 1 (``str.isdigit`` also accepts
    ``'²'``, which ``int`` refuses, and ``int`` accepts ``'٤'``, ``'+4'`` and ``' 4'``)."""
    return (
        0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdigit()
        and (text[0] != "0" or len(text) == 1))


def to_int(text: str) -> int | None:
    """``text`` as a number when :func:`is_number` accepts it, else None."""
    return int(text) if is_number(text) else None


def parse_int(name: str, value: str, *, minimum: int = 0, fix: str | None = None) -> int:
    """Parse a non-negative decimal integer from an environment variable, strictly
    (:func:`is_number`: ASCII digits only, no sign, blank, line break or leading zero)."""
    if not is_number(value):
        digits = value.isascii() and value.isdigit()
        raise SlurmEnvError(
            f"{name} has more than {MAX_DIGITS} digits" if digits and len(value) > MAX_DIGITS
            else f"{name} has a leading zero" if digits
            else f"{name} is not a whole number (ASCII digits only: no sign, blank or line "
            "break)",
            variable=name, value=value,
            fix=fix or f"{name} must be a decimal integer as Slurm writes it")
    number = int(value)
    if number < minimum:
        raise SlurmEnvError(
            f"{name} must be at least {minimum}",
            variable=name, value=value, fix=fix or f"{name} must be a decimal integer >= {minimum}")
    return number


#: The longest host name (RFC 1035: 253 characters without the final dot) and label.
MAX_HOST = 253
MAX_LABEL = 63
HOST_RULE = (
    "a host name (letters, digits, '-', '_' and '.'; labels of 1-63 characters between dots, "
    "not starting or ending with '-'; at most 253 characters) or an IP address")


def host_problem(text: str) -> str | None:
    """Why ``text`` is not a host name or an IP literal (IPv4 dotted quad, IPv6), or None.

    The one rule for every address slurmenv uses or exports (``MASTER_ADDR``, ``TF_CONFIG``'s
    hosts, the address template's results): checked before use, so a shell word (``a;b``,
    ``$HOME``, ``*``), a blank, an empty or over-long label (which ``socket`` refuses with a
    ``UnicodeError``) or a 100 KB value never reaches a framework, DNS or the environment.
    String operations only (no ``re``, no ``ipaddress`` unless the text holds a ':'): this
    runs on ``export``'s path.
    """
    if not text:
        return "it is empty"
    if len(text) > MAX_HOST + 1:
        return f"it is {len(text)} characters long (a host name has at most {MAX_HOST})"
    if ":" in text:
        import ipaddress  # an IPv6 literal only

        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            return "it holds a ':' but is not an IPv6 address"
        return None
    # besides ASCII letters and digits: '-' and '.' (RFC 1123), and '_', which real cluster
    # node names hold and resolvers accept
    if not (text.isascii() and text.replace("-", "a").replace("_", "a").replace(".", "a")
            .isalnum()):
        return "it holds a character other than letters, digits, '-', '_' and '.'"
    name = text.removesuffix(".")  # a fully qualified name's final dot
    if len(name) > MAX_HOST:
        return f"it is {len(name)} characters long (a host name has at most {MAX_HOST})"
    for label in name.split("."):
        if not label:
            return "it has an empty label (a dot at its start, or two dots in a row)"
        if len(label) > MAX_LABEL:
            return f"a label is {len(label)} characters long (at most {MAX_LABEL} between dots)"
        if label[0] == "-" or label[-1] == "-":
            return f"the label {label!r} starts or ends with '-'"
    return None


def check_host(variable: str, value: str, fix: str, what: str = "") -> str:
    """``value`` when :func:`host_problem` finds nothing; else a SlurmEnvError naming
    ``variable``, ``value`` (shortened for display) and ``fix``. ``what`` says where the
    address comes from when ``value`` is not the variable's own value (a template's result)."""
    problem = host_problem(value)
    if problem is not None:
        shown = repr(_shorten(value))
        raise SlurmEnvError(
            f"{what or variable} {shown} is not a host name or IP address: {problem}",
            variable=variable, value=value, fix=fix)
    return value
