"""Rendering variables for shells and machines; every format round-trips exactly.

Each shell format also has a *failure* text: what ``export`` prints on stdout when resolution
fails, so that ``eval $(slurmenv export); python train.py`` stops before ``python`` runs in a
script or ``bash -c``, but does not close an interactive shell (an ``salloc`` session).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Callable

SHELLS = ("sh", "bash", "zsh", "fish", "csh", "tcsh")
FORMATS = ("json", "dotenv")


def sh_quote(value: str) -> str:
    """POSIX single quoting: ``'`` becomes ``'\\''``."""
    return "'" + value.replace("'", "'\\''") + "'"


def render_sh(values: Mapping[str, str]) -> str:
    return "".join(f"export {name}={sh_quote(value)}\n" for name, value in values.items())


def fish_quote(value: str) -> str:
    """fish single quotes: only ``\\`` and ``'`` are escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def render_fish(values: Mapping[str, str]) -> str:
    return "".join(f"set -gx {name} {fish_quote(value)};\n" for name, value in values.items())


def csh_quote(value: str) -> str:
    """csh single quotes: ``'`` closes and reopens, ``!`` is escaped (history), newline too."""
    out = "'" + value.replace("'", "'\\''").replace("!", "'\\!'") + "'"
    return out.replace("\n", "'\\\n'")


def render_csh(values: Mapping[str, str]) -> str:
    return "".join(f"setenv {name} {csh_quote(value)};\n" for name, value in values.items())


def render_json(values: Mapping[str, str]) -> str:
    return json.dumps(dict(values), indent=2) + "\n"


def render_dotenv(values: Mapping[str, str]) -> str:
    """``NAME='value'`` lines (Docker/systemd-style env files read by python-dotenv too)."""
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
FAILURE = {
    "sh": 'printf %s "$-" | grep -q i || exit 1\n',
    "fish": "status is-interactive; or exit 1;\n",
    "csh": "if ( ! $?prompt ) exit 1;\n",
}
FAILURE["bash"] = FAILURE["zsh"] = FAILURE["sh"]
FAILURE["tcsh"] = FAILURE["csh"]


def render(values: Mapping[str, str], fmt: str) -> str:
    """Render ``values`` in a shell syntax or a data format (see SHELLS and FORMATS)."""
    return RENDERERS[fmt](values)
