"""The outputs: which variables each ``--for`` set holds, their values (the torch variables,
``TF_CONFIG``, torchrun's ``PET_*``, the per-task bindings), and rendering them for shells and
machines; every format round-trips exactly.

Each shell format also has a *failure* text: what ``export`` prints on stdout when resolution
fails, so that ``eval $(slurmenv export); python train.py`` stops before ``python`` runs in a
script or ``bash -c``, but does not close an interactive shell (an ``salloc`` session).
"""

from __future__ import annotations

from . import gpus, threads
from .errors import SlurmEnvError
from .lean import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

SHELLS = ("sh", "bash", "zsh", "fish", "csh", "tcsh")
FORMATS = ("json", "dotenv")

# -- the output sets (export --for) --------------------------------------------------------
TORCH_NAMES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "NNODES", "MASTER_ADDR", "MASTER_PORT",)
#: Each rank-like output and the field of the Resolution (and of the launcher's Task, under
#: the same name) that holds its value: ``GROUP_RANK`` is torchrun's name for ``NODE_RANK``.
RANK_FIELDS = {
    "RANK": "rank", "LOCAL_RANK": "local_rank", "WORLD_SIZE": "world_size",
    "LOCAL_WORLD_SIZE": "local_world_size", "NODE_RANK": "node_rank", "GROUP_RANK": "node_rank",
    "NNODES": "nnodes",
}
TF_NAMES = ("TF_CONFIG",)
#: torchrun's own variables for its options: a plain ``torchrun train.py`` per node joins the
#: step (slurmenv/commands/torchrun.py; not part of "all").
PET_NAMES = (
    "PET_NNODES", "PET_NPROC_PER_NODE", "PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_RDZV_ID",
    "PET_RDZV_CONF",)
#: Per-task settings, emitted (after the others) by "torch", "tf" and "all" only when the
#: resolution has a value for them: GPU lists narrowed by GPU binding (gpus.py) and thread
#: counts the user left unset (threads.py).
BINDING_NAMES = gpus.VARIABLES + threads.VARIABLES
#: What ``env()`` emits for each ``for_`` choice, in output order.
OUTPUTS = {
    "torch": TORCH_NAMES + BINDING_NAMES, "tf": TF_NAMES + BINDING_NAMES,
    "all": TORCH_NAMES + TF_NAMES + BINDING_NAMES,
    "torchrun": PET_NAMES,
}


#: What ``apply()`` replaces even without ``overwrite``: values that describe the step (an
#: inherited one is stale) and GPU lists that binding narrowed.
ALWAYS_REPLACED = ("MASTER_ADDR", "TF_CONFIG", *gpus.VARIABLES)


# -- rendering -----------------------------------------------------------------------------


def sh_quote(value: str) -> str:
    """POSIX single quoting: ``'`` becomes ``'\\''``."""
    return "'" + value.replace("'", "'\\''") + "'"


# ``eval $(slurmenv export)`` (unquoted, as documented) splits the output at whitespace and
# expands glob patterns *before* eval re-joins the words with single spaces. So the sh output
# holds no glob character and no whitespace but single spaces between non-blank characters:
# they are written outside the single quotes in forms that eval turns back into themselves.
# "(" too: bash 5.2 takes a word with "+(", "@(" or "!(" for a pattern even without extglob,
# and a matching file name would replace it with its backslashes removed ('\0+(' -> '0+(').
# Each is replaced in turn, in this order, which replaces every such character of the quoted
# value once: no replacement holds a character replaced after it (the tab's holds "(" and " ").
# No regular expression: compiling one would cost every task of a step (export's path).
_NEWLINE_VAR = "_slurmenv_nl"
_SPLIT_SAFE = {
    "(": "'\\('",
    "[": "'\\['",
    "*": "'\\*'",
    "?": "'\\?'",
    "\n": f"'\"${_NEWLINE_VAR}\"'",
    " ": "'\" \"'",
    "\t": "'\"$(printf '\\011')\"'",
}


def sh_word(value: str) -> str:
    """``sh_quote`` that also survives the field splitting and pathname expansion of an
    unquoted ``$(...)``; a newline needs ``SH_NEWLINE_SETUP`` evaluated first."""
    word = sh_quote(value)
    for char, safe in _SPLIT_SAFE.items():
        if char in word:
            word = word.replace(char, safe)
    return word


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
# "`printf '\\173...'`" (the double quotes keep it one word, blanks included). A long value is
# made by several printfs in the same word, each argument at most PRINTF_ARG_MAX characters:
# Linux refuses to start a program with one argument of 128 KiB or more ("Argument list too
# long"), and the backquote then gives an empty value with exit status 0.
PRINTF_ARG_MAX = 65536
_CSH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,:/=+@-")


def csh_quote(value: str, name: str = "value") -> str:
    """A csh word for ``value`` that survives unquoted backquote eval (see above).

    A newline cannot: csh's backquote splits its output at newlines whatever the quoting, so
    such a value raises SlurmEnvError (other shells and formats carry it).
    """
    if "\n" in value:
        raise SlurmEnvError(
            f"{name} contains a newline, which csh and tcsh cannot receive through eval",
            variable=name, value=value,
            fix="use another format (--shell sh, bash, zsh or fish, --format json or dotenv) "
            "or slurmenv exec -- COMMAND")
    if all(char in _CSH_SAFE for char in value):
        return f"'{value}'"
    chunks, chunk = [], ""
    for char in value:
        if char in _CSH_SAFE:
            token = char
        elif char == "%":
            token = "%%"
        else:
            token = "".join(f"\\{byte:03o}" for byte in char.encode("utf-8", "surrogateescape"))
        if len(chunk) + len(token) > PRINTF_ARG_MAX:
            chunks.append(chunk)
            chunk = ""
        chunk += token
    chunks.append(chunk)
    return '"' + "".join(f"`printf '{_not_an_option(text)}'`" for text in chunks) + '"'


def _not_an_option(text: str) -> str:
    return "\\055" + text[1:] if text.startswith("-") else text


def render_tcsh(values: Mapping[str, str]) -> str:
    return "".join(
        f"setenv {name} {csh_quote(value, name)};\n" for name, value in values.items())


#: The longest ``setenv NAME WORD;`` line (without its newline) that BSD csh (Debian's ``csh``
#: package, ``/bin/bsd-csh``, which the ``csh`` alternative prefers to tcsh) takes through
#: both documented forms, ``eval `...` `` and ``eval "`...`"``: one character more and eval
#: fails with "Word too long" (measured on csh 20110502; tests/test_shells.py checks it on the
#: real shell). A TF_CONFIG of about 1 KB of JSON reaches it once written as octal escapes.
#: tcsh has no such limit.
CSH_LINE_MAX = 4090


def render_csh(values: Mapping[str, str]) -> str:
    """tcsh's lines, refused when one is longer than BSD csh takes (:data:`CSH_LINE_MAX`)."""
    lines = render_tcsh(values).splitlines(keepends=True)
    for (name, value), line in zip(values.items(), lines):
        if len(line) - 1 > CSH_LINE_MAX:
            raise SlurmEnvError(
                f"{name} is {len(value)} characters, written for csh as a line of "
                f"{len(line) - 1}, longer than the {CSH_LINE_MAX} BSD csh takes "
                "(eval fails with 'Word too long')",
                variable=name, value=value,
                fix="if your csh is tcsh, use --shell tcsh; else use --shell sh (or bash, zsh, "
                "fish) in a task of that shell, run slurmenv exec -- COMMAND, or leave TF_CONFIG "
                "out with --for torch")
    return "".join(lines)


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
    "tcsh": render_tcsh,
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
