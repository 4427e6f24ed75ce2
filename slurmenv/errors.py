"""The one exception slurmenv raises: it names the variable, its value and the fix."""

from __future__ import annotations

from ._compat import TYPE_CHECKING

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

    def __init__(
        self,
        message: str,
        *,
        variable: str | None = None,
        value: str | None = None,
        fix: str | None = None,
    ) -> None:
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
        for char in text
    )


#: The most digits a number slurmenv reads may have: every count, ID, rank and port Slurm and
#: the launchers write fits (a 64-bit value has at most 20), and ``int()`` never meets Python's
#: 4,300-digit limit or the quadratic cost below it.
MAX_DIGITS = 20


def is_number(text: str) -> bool:
    """ASCII decimal digits only, at most :data:`MAX_DIGITS` of them: the one test of every
    number slurmenv reads (``str.isdigit`` also accepts ``'²'``, which ``int`` refuses, and
    ``int`` accepts ``'٤'``, ``'+4'`` and ``' 4'``, which no launcher writes)."""
    return 0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdigit()


def to_int(text: str) -> int | None:
    """``text`` (stripped) as a number when :func:`is_number` accepts it, else None."""
    text = text.strip()
    return int(text) if is_number(text) else None


def parse_int(name: str, value: str, *, minimum: int = 0, fix: str | None = None) -> int:
    """Parse a non-negative decimal integer from an environment variable."""
    text = value.strip()
    if not is_number(text):
        too_long = len(text) > MAX_DIGITS and text.isascii() and text.isdigit()
        raise SlurmEnvError(
            f"{name} has more than {MAX_DIGITS} digits" if too_long
            else f"{name} is not a whole number",
            variable=name,
            value=value,
            fix=fix or f"{name} must be a decimal integer as Slurm writes it",
        )
    number = int(text)
    if number < minimum:
        raise SlurmEnvError(
            f"{name} must be at least {minimum}",
            variable=name,
            value=value,
            fix=fix or f"{name} must be a decimal integer >= {minimum}",
        )
    return number
