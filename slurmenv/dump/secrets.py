"""No secret in a dump, whatever path a value takes: :func:`scrub`, the one filter over the
whole record (environment, files, options, every string of the recorded resolution or refusal,
the probe), applied where the record is made (``capture.collect``) and nowhere else.

The environment's values are redacted by name and shape as they are selected
(``allowlist.select``, ``launchers.base.redact``); a value can still reach the record another
way: quoted in a refusal (a ``slurm.conf`` line), copied into ``MASTER_ADDR`` and its source
(``SLURMENV_ADDR_TEMPLATE``), a summary, a note, an option. So every string of the record
(keys too) goes through :func:`scrub_text`, which applies the rules of ``launchers.base`` to
pieces of a text rather than to a whole value:

- the value of every credential variable of the task (``base.is_credential``: ``*_TOKEN``,
  ``OMPI_MCA_orte_precondition_transports``...), wherever it appears;
- a URL's ``user:password@``;
- ``NAME=value`` and ``NAME: value`` whose NAME is a credential's (``?access_token=...`` too);
- a token of a well-known form (``base.TOKEN_PREFIXES``: ``ghp_``, ``AKIA``...) where a word
  or a piece of one (after ``-``, ``.``, ``{``...) starts, to the next separator.

The record says how many strings were changed (``redacted``): a replay of a redacted record
reads ``REDACTED`` where the task read the secret, and says so when it differs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..launchers import base

REDACTED = base.REDACTED
#: The shortest credential value replaced wherever it appears in the record (a shorter one,
#: ``1``, would replace every digit; such a value is still redacted where it is the whole value).
MIN_SECRET = 6

#: A token of a well-known form (``base.TOKEN_PREFIXES``) wherever a word or a piece of one
#: starts (``{host}-ghp_...`` too, which ``base.holds_token`` misses), to the next separator.
_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, base.TOKEN_PREFIXES))
                    + r")[^\s=:,;@/'\"]*")
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^\s/@'\"]*)@")
_BARE_USERINFO = re.compile(r"(?<![\w.:/-])([^\s/@:'\"=,;]+):([^\s/@'\"]+)@(?=[\w\[])")
#: What every rule below needs in a text: without any, none applies (one scan).
_TRIGGER = re.compile(r"[@=:]|" + "|".join(map(re.escape, base.TOKEN_PREFIXES)))
#: ``NAME=value`` or ``NAME: value`` whose NAME holds a word of ``base.CREDENTIAL_WORDS``
#: (a URL's query parameter too: ``?access_token=...``).
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]*(?:" + "|".join(base.CREDENTIAL_WORDS)
    + r""")[A-Za-z0-9_.-]*)(['"]?\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s,;'"]+)""", re.IGNORECASE)


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """The values of the task's credential variables (``base.is_credential``) long enough to
    be looked for anywhere (:data:`MIN_SECRET`), longest first."""
    values = {str(value) for name, value in environ.items()
              if base.is_credential(name) and len(str(value)) >= MIN_SECRET}
    return sorted(values, key=len, reverse=True)


def _assignment(match: re.Match[str]) -> str:
    name, sep, value = match.groups()
    return f"{name}{sep}{REDACTED}" if base.is_credential(name) and value != REDACTED \
        else match.group(0)


def scrub_text(text: str, secrets: list[str] = []) -> str:  # noqa: B006 - never mutated
    """``text`` with every secret of it (the module's rules) replaced by ``REDACTED``."""
    for value in secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    if _TRIGGER.search(text) is None:  # the common case: a host name, a number, a word
        return text
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _BARE_USERINFO.sub(f"{REDACTED}@", text)
    text = _ASSIGNMENT.sub(_assignment, text)
    return _TOKEN.sub(REDACTED, text)


_PLAIN = frozenset((int, float, bool, type(None)))  # what holds no text


class _Scrubber:
    def __init__(self, secrets: list[str]) -> None:
        self.secrets = secrets
        self.changed = 0

    def text(self, value: str) -> str:
        out = scrub_text(value, self.secrets)
        if out != value:
            self.changed += 1
        return out

    def walk(self, value: Any) -> Any:
        """``value`` (what JSON holds) with every string, keys too, scrubbed (the record
        ``collect`` builds nests a few levels: the recursion is bounded)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if _PLAIN.issuperset(map(type, value)):  # a layout's million numbers: C speed
                return list(value)
            return [self.walk(v) for v in value]
        return value


#: Fields of a record that hold base64, not text (their files were checked line by line
#: before they were recorded: ``capture._why_not_kept``).
OPAQUE = ("binary_files",)


def scrub(record: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """The record with every secret of it replaced (module docstring), and ``redacted``: how
    many of its strings were changed, here or as the environment was selected (0: none)."""
    scrubber = _Scrubber(secret_values(environ))
    out = {key: value if key in OPAQUE else scrubber.walk(value)
           for key, value in record.items()}
    selected = out.get("environ") or {}  # redacted as selected (allowlist.select) or here
    out["redacted"] = scrubber.changed + sum(
        value != environ.get(name) for name, value in selected.items())
    return out
