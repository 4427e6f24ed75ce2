"""The launcher tables of ``docs/launchers.md`` and ``docs/launchers-beyond-slurm.md``, made from
``launcher_claims.CLAIMS`` (a test keeps the pages equal to them; ``python tests/regen.py``
rewrites them). Test and docs code: nothing in the package imports it.

Every launcher of the registry has its claims there: one plain dict per way its tasks are
started, each a row of the launcher table; :func:`claims` checks them. The keys:

* ``name``: the launcher as prose calls it (``"Open MPI"``, ``"MPICH (Hydra)"``); the README's
  claims are checked against it;
* ``started_by``, ``signal``: the table's columns (Markdown); every variable ``signal`` names in
  backquotes is one that a launcher reads;
* ``status``, one of :data:`STATUSES`, and ``what``: what was run or what it rests on, in a few
  words;
* ``tests``: pytest node ids (``tests/test_real_mpi.py::test_x[openmpi-default]``; ``[prefix-…]``
  stands for every parameter starting so; a file alone for all its tests), each optionally
  followed by `` (what it covers)``. A test collects each one; :data:`PROVEN` needs at least one,
  and only real-cluster tests;
* ``version``: what was run (:data:`PROVEN` needs it), ``source``: the documentation the
  variables come from (:data:`DOCUMENTED` needs it), ``how``: how it was (not) tested besides
  the tests, ``note``: a caveat for the status column;
* ``mpi``: True for a row of the MPI launcher × version table; ``page``: the page that says
  more (its table lists the claim).
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: The claim that the real Slurm cluster of the test suite ran it (real-cluster tests name it).
PROVEN = "proven on the real cluster"
#: Read as its documentation says, never run here (the source is named).
DOCUMENTED = "documented variables only"
UNIT = "unit tests"
UNTESTABLE = "not testable here"
STATUSES = (PROVEN, DOCUMENTED, UNIT, UNTESTABLE)
BEYOND = "launchers-beyond-slurm.md"
#: A test entry: a node id (file, then ``::name`` and ``[parameters]``) and what it covers.
TEST = re.compile(r"(tests/[\w/]+\.py(?:::\w+(?:\[[^\]]*\])?)?)(?: \((.+)\))?")


class Claim(NamedTuple):
    """One row of the launcher table (one way a launcher's tasks are started), checked."""

    module: str  # the registry's name of the launcher module
    name: str
    started_by: str
    signal: str
    status: str
    what: str = ""
    version: str = ""
    tests: tuple[str, ...] = ()
    source: str = ""
    how: str = ""
    note: str = ""
    mpi: bool = False
    page: str = ""


REQUIRED = ("name", "started_by", "signal", "status")


def check(module: str, raw: object) -> Claim:
    """One declared claim of launcher ``module``; ValueError or TypeError says what is wrong."""
    where = f"tests/launcher_claims.py, {module}"
    if not isinstance(raw, dict):
        raise TypeError(f"{where}: a claim is a dict, not {raw!r}")
    unknown = sorted(set(raw) - set(Claim._fields[1:]))
    missing = [key for key in REQUIRED if not raw.get(key)]
    if unknown or missing:
        raise ValueError(f"{where}: unknown keys {unknown}, missing {missing} in {raw!r}")
    claim = Claim(module, **raw)
    text = [getattr(claim, key) for key in Claim._fields if key not in ("tests", "mpi")]
    if not all(isinstance(value, str) and "|" not in value and "\n" not in value
               for value in text):
        raise ValueError(f"{where}: every value is one line of text without '|': {raw!r}")
    if not isinstance(claim.mpi, bool) or not isinstance(claim.tests, tuple):
        raise TypeError(f"{where}: mpi is True or False, tests a tuple: {raw!r}")
    for entry in claim.tests:
        if not isinstance(entry, str) or not TEST.fullmatch(entry):
            raise ValueError(f"{where}: {entry!r} is not 'tests/FILE.py[::NAME[PARAMS]] [(WHAT)]'")
    problem = {
        PROVEN: not (claim.version and claim.tests and claim.what) and "version, tests and what",
        DOCUMENTED: not claim.source and "the source",
        UNIT: not claim.tests and "tests",
        UNTESTABLE: not (claim.how or claim.what) and "how or what",
    }.get(claim.status, f"a status among {STATUSES}")
    if problem:
        raise ValueError(f"{where}: {claim.name} ({claim.status}) needs {problem}")
    return claim


def claims() -> list[Claim]:
    """Every launcher's claims, in registry order: ValueError for a launcher without claims
    or claims of a launcher not registered."""
    from launcher_claims import CLAIMS

    from slurmenv.launchers import REGISTRY

    unknown = sorted(set(CLAIMS) - set(REGISTRY))
    if unknown:
        raise ValueError(f"tests/launcher_claims.py: {unknown} not in the registry")
    found = []
    for name in REGISTRY:
        if not CLAIMS.get(name):
            raise ValueError(f"tests/launcher_claims.py declares no claims of launcher {name!r}")
        found += [check(name, raw) for raw in CLAIMS[name]]
    return found


def node_ids(claim: Claim) -> list[str]:
    """The node ids ``claim`` names (without what each covers)."""
    return [match.group(1) for match in map(TEST.fullmatch, claim.tests) if match]


def tests_cell(claim: Claim) -> str:
    """The tests, a file named once (``::name`` after it), then ``how``."""
    parts, last = [], ""
    for entry in claim.tests:
        match = TEST.fullmatch(entry)
        assert match is not None
        node, covers = match.groups()
        file, sep, rest = node.partition("::")
        shown = f"`::{rest}`" if sep and file == last else f"`{node}`"
        last = file
        parts.append(shown + (f" ({covers})" if covers else ""))
    text = ", ".join(parts)
    return "; ".join(part for part in (text, claim.how) if part) or "-"


def status_cell(claim: Claim, link: bool = True) -> str:
    """The launcher table's status: the claim's status, what, and where to read more."""
    if claim.status == PROVEN:
        text = f"**proven**: {claim.what}"
    elif claim.status == DOCUMENTED:
        text = f"{DOCUMENTED} ({claim.source})" + (f"; {claim.what}" if claim.what else "")
    else:
        detail = claim.what or claim.how
        text = claim.status + (f": {detail}" if detail else "")
    if link and claim.page:
        text += f" ([{claim.page}]({claim.page}))"
    return text


def version_status(claim: Claim) -> str:
    """The status column of the × version tables."""
    text = claim.status if claim.status != DOCUMENTED else f"{DOCUMENTED} ({claim.source})"
    return text + (f"; {claim.note}" if claim.note else "")


def launchers(found: list[Claim]) -> str:
    """docs/launchers.md: every launcher, who starts its tasks, what tells it, its status."""
    lines = ["| launcher (module) | started by | signal | status here |", "|---|---|---|---|"]
    lines += [f"| `{c.module}` | {c.started_by} | {c.signal} | {status_cell(c)} |" for c in found]
    return "\n".join(lines)


def _order(claim: Claim) -> int:
    return STATUSES.index(claim.status)


def mpi_versions(found: list[Claim]) -> str:
    """docs/launchers.md: the MPI launchers' rows, proven first, with their tests."""
    lines = ["| MPI | version | how it was tested | status |", "|---|---|---|---|"]
    lines += [f"| {c.name} | {c.version or '-'} | {tests_cell(c)} | {version_status(c)} |"
              for c in sorted((c for c in found if c.mpi), key=_order)]
    return "\n".join(lines)


def launcher_tests(found: list[Claim]) -> str:
    """docs/launchers.md: the other launchers' rows, in registry order, with their tests."""
    lines = ["| launcher | module | version | how it was tested | status |",
             "|---|---|---|---|---|"]
    lines += [f"| {c.name} | `{c.module}` | {c.version or '-'} | {tests_cell(c)} | "
              f"{version_status(c)} |" for c in found if not c.mpi]
    return "\n".join(lines)


def beyond_slurm(found: list[Claim]) -> str:
    """docs/launchers-beyond-slurm.md: the claims that page details."""
    lines = ["| launcher | module | evidence |", "|---|---|---|"]
    lines += [f"| {c.name} | `{c.module}.py` | {status_cell(c, link=False)} |"
              for c in found if c.page == BEYOND]
    return "\n".join(lines)


def registry_order() -> str:
    """docs/design.md: the registry in its order, each launcher with its signal variables
    (``SIGNALS``: its module is not imported without one) and the comment that gives the reason
    for its place (the comment lines above it in ``slurmenv/launchers/__init__.py``)."""
    import io
    import tokenize
    from pathlib import Path

    from slurmenv import launchers

    source = Path(launchers.__file__).read_text(encoding="utf-8")
    body = source[source.index("REGISTRY = ("):]
    reasons: dict[str, str] = {}
    comment: list[str] = []
    for token in tokenize.generate_tokens(io.StringIO(body).readline):
        if token.type == tokenize.COMMENT:
            comment.append(token.string.lstrip("#").strip())
        elif token.type == tokenize.STRING:
            reasons[token.string.strip("\"'")] = " ".join(comment)
            comment = []
        elif token.type == tokenize.OP and token.string == ")":
            break
    lines = []
    for number, name in enumerate(launchers.REGISTRY, 1):
        signals = launchers.SIGNALS.get(name)
        shown = (f" (imported only with {', '.join(f'`{s}`' for s in signals)})"
                 if signals else "")
        if not reasons.get(name):
            raise ValueError(f"slurmenv/launchers/__init__.py: no comment above {name!r} in "
                             "REGISTRY says why it is there")
        lines.append(f"{number}. **{name}**{shown}: {reasons[name]}")
    return "\n".join(lines)
