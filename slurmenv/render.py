"""Rendering variables for shells and machines; every format round-trips exactly.

Each shell format also has a *failure* text: what ``export`` prints on stdout when resolution
fails, so that ``eval $(slurmenv export); python train.py`` stops before ``python`` runs in a
script or ``bash -c``, but does not close an interactive shell (an ``salloc`` session).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

SHELLS = ("sh", "bash", "zsh", "fish", "csh", "tcsh")
FORMATS = ("json", "dotenv")


def sh_quote(value: str) -> str:
    """POSIX single quoting: ``'`` becomes ``'\\''``."""
    return "'" + value.replace("'", "'\\''") + "'"


# ``eval $(slurmenv export)`` (unquoted, as documented) splits the output at whitespace and
# expands glob patterns *before* eval re-joins the words with single spaces. So the sh output
# holds no glob character and no whitespace but single spaces between non-blank characters:
# they are written outside the single quotes in forms that eval turns back into themselves.
_NEWLINE_VAR = "_slurmenv_nl"
_SPLIT_SAFE = {
    " ": "'\" \"'",
    "\t": "'\"$(printf '\\011')\"'",
    "\n": f"'\"${_NEWLINE_VAR}\"'",
    "*": "'\\*'",
    "?": "'\\?'",
    "[": "'\\['",
}
_SPLIT_CHARS = re.compile(r"[ \t\n*?\[]")


def sh_word(value: str) -> str:
    """``sh_quote`` that also survives the field splitting and pathname expansion of an
    unquoted ``$(...)``; a newline needs ``SH_NEWLINE_SETUP`` evaluated first."""
    return _SPLIT_CHARS.sub(lambda m: _SPLIT_SAFE[m.group()], sh_quote(value))


SH_NEWLINE_SETUP = f"{_NEWLINE_VAR}=$(printf '\\012.');{_NEWLINE_VAR}=${{{_NEWLINE_VAR}%.}};\n"


def render_sh(values: Mapping[str, str]) -> str:
    lines = [f"export {name}={sh_word(value)};\n" for name, value in values.items()]
    if any("\n" in value for value in values.values()):
        lines = [SH_NEWLINE_SETUP, *lines, f"unset {_NEWLINE_VAR};\n"]
    return "".join(lines)


def fish_quote(value: str) -> str:
    """fish single quotes: only ``\\`` and ``'`` are escaped; a newline is written ``'\\n'``
    (outside the quotes) so that ``eval (...)`` works even without ``| string collect``, which
    would otherwise split the value into lines."""
    quoted = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return quoted.replace("\n", "'\\n'")


def render_fish(values: Mapping[str, str]) -> str:
    return "".join(f"set -gx {name} {fish_quote(value)};\n" for name, value in values.items())


# ``eval `slurmenv export --shell csh` `` splits the output into words at blanks and newlines
# and applies brace, tilde and glob expansion to each word *before* eval parses them (a
# TF_CONFIG's "{...}" would lose its braces); eval then does history (!), variable ($) and
# command (`) substitution. So a csh value is written plain when it holds only characters
# special nowhere, and otherwise made at eval time by printf from octal escapes:
# "`printf '\\173...'`" (the double quotes keep it one word, blanks included).
_CSH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,:/=+@-")


def csh_quote(value: str, name: str = "value") -> str:
    """A csh word for ``value`` that survives unquoted backquote eval (see above).

    A newline cannot: csh's backquote splits its output at newlines whatever the quoting, so
    such a value raises SlurmEnvError (other shells and formats carry it).
    """
    if "\n" in value:
        from .errors import SlurmEnvError

        raise SlurmEnvError(
            f"{name} contains a newline, which csh and tcsh cannot receive through eval",
            variable=name, value=value,
            fix="use another format (--shell sh, bash, zsh or fish, --format json or dotenv) "
            "or slurmenv exec -- COMMAND",
        )
    if all(char in _CSH_SAFE for char in value):
        return f"'{value}'"
    out = []
    for char in value:
        if char in _CSH_SAFE:
            out.append(char)
        elif char == "%":
            out.append("%%")
        else:
            out.extend(f"\\{byte:03o}" for byte in char.encode("utf-8", "surrogateescape"))
    text = "".join(out)
    if text.startswith("-"):  # not an option of printf
        text = "\\055" + text[1:]
    return f"\"`printf '{text}'`\""


def render_csh(values: Mapping[str, str]) -> str:
    return "".join(
        f"setenv {name} {csh_quote(value, name)};\n" for name, value in values.items()
    )


def render_json(values: Mapping[str, str]) -> str:
    import json  # not at module level: `slurmenv export` (sh) must not pay for it

    return json.dumps(dict(values), indent=2) + "\n"


def render_dotenv(values: Mapping[str, str]) -> str:
    """``NAME='value'`` lines in POSIX sh syntax: ``set -a; . ./FILE; set +a`` reads every
    value back exactly; python-dotenv reads the same values when none holds ``'``, ``\\`` or a
    control character."""
    return "".join(f"{name}={sh_quote(value)}\n" for name, value in values.items())


RENDERERS: dict[str, Callable[[Mapping[str, str]], str]] = {
    "sh": render_sh,
    "bash": render_sh,
    "zsh": render_sh,
    "fish": render_fish,
    "csh": render_csh,
    "tcsh": render_csh,
    "json": render_json,
    "dotenv": render_dotenv,
}

# Evaluated after a failed export: exit a non-interactive shell, leave an interactive one.
# No glob characters: the unquoted $(...) result undergoes pathname expansion before eval.
# csh tests `$?prompt` (set only in interactive shells); "?" would be a glob and "!", "$" are
# substituted inside double quotes, so printf writes the test for a nested eval.
FAILURE = {
    "sh": 'printf %s "$-" | grep -q i || exit 1\n',
    "fish": "status is-interactive; or exit 1;\n",
    "csh": "eval \"`printf 'if ( \\041 \\044\\077prompt ) exit 1'`\";\n",
}
FAILURE["bash"] = FAILURE["zsh"] = FAILURE["sh"]
FAILURE["tcsh"] = FAILURE["csh"]


def render(values: Mapping[str, str], fmt: str) -> str:
    """Render ``values`` in a shell syntax or a data format (see SHELLS and FORMATS)."""
    return RENDERERS[fmt](values)
