"""The sections the benchmark prints, in order: each heading and its tables' columns, declared
once. bench.py prints from here, page.py refuses to write a page whose printout has another
shape, and tests/test_performance_page.py holds docs/performance.md to it without running the
benchmark. A heading's ``{fields}`` are what a run fills in (sizes, rounds)."""

from __future__ import annotations

import re
import string
from typing import NamedTuple


class Section(NamedTuple):
    level: int  # 2: "## ", 3: "### "
    title: str  # a str.format template
    tables: tuple[tuple[str, ...], ...] = ()  # each table's columns, in order

    def heading(self, **fields: object) -> str:
        return "#" * self.level + " " + self.title.format(**fields)

    def template(self) -> str:
        return "#" * self.level + " " + self.title

    def matches(self, heading: str) -> bool:
        """Whether ``heading`` (a printed one) is this section's, whatever its fields."""
        pattern = "".join(re.escape(text) + ("" if field is None else ".*?")
                          for text, field, _, _ in string.Formatter().parse(self.title))
        return re.fullmatch("#" * self.level + " " + pattern, heading) is not None


PROCESSES = ("nodes", "command", "median", "× python -c pass", '× python -c "import re"',
             "same, CPU time")
STARTUP = Section(2, "Start-up of one task, {install}", (PROCESSES,))
CONTEXT = Section(3, "The same with this machine's interpreter (context)", (PROCESSES,))
WHERE = Section(2, "Where `slurmenv export`'s time goes ({nodes:,} nodes, fresh virtual "
                   "environment)", (("part", "time"), ("module", "import (self)"),
                                    ("avoided", "cost")))
IN_PROCESS = Section(2, "In process (median of {calls} calls; {few} at {growth:,} and "
                        "{largest:,})",
                     (("nodes", "resolve()", "µs/node", "resolve() + env('torch')",
                       "TF_CONFIG dict", "µs/node", "TF_CONFIG JSON"),))
RIVALS = Section(2, "Rank 0 of an mpirun: the look for rival launches (median of {calls} calls)",
                 (("processes on the node", "resolve() without looking", "resolve()",
                   "the look", "per process"),))
STEP_CHECK = Section(2, "The step check against the number of ranks (`srun -K slurmenv exec "
                        "--preflight`)",
                     (("ranks", "nodes", "srun slurmenv exec -- true",
                       "... exec --preflight -- true", "the check adds", "rank 0's figure"),))
# docs/step-check.md links to this heading's anchor
STEP_SCALE = Section(2, "The step check at 1,000 to 10,000 tasks, beside torch's TCPStore",
                     (("tasks", "slurmenv rank 0: process", "gathering (its report)", "its CPU",
                       "its peak memory", "torch TCPStore: all joined",
                       "its master's CPU meanwhile", "its peak memory"),))
HOSTILE = Section(2, "Hostile input against the largest valid step (issue 26; CPU time, median "
                     "of {rounds})",
                  (("input (1,000 nodes x 2 tasks)", "CPU time", "over the largest valid",
                    "answer"),))
MEMORY = Section(2, "Peak memory at {tasks:,} tasks (maximum resident set size)",
                 (("process", "peak RSS", "over the floor"),))
TARGETS = Section(2, "Targets{information}")

#: a full run prints them all, in this order; a short run leaves out CONTEXT and MEMORY (and
#: WHERE when the fresh virtual environment cannot be built)
ALL = (STARTUP, CONTEXT, WHERE, IN_PROCESS, RIVALS, STEP_CHECK, STEP_SCALE, HOSTILE, MEMORY,
       TARGETS)


class Printed(NamedTuple):
    heading: str
    tables: tuple[tuple[str, ...], ...]


def shape(markdown: str) -> list[Printed]:
    """The ``##``/``###`` sections of ``markdown`` and the columns of each table under them
    (what comes before the first such heading is left out)."""
    found: list[Printed] = []
    previous = ""
    for line in markdown.splitlines():
        if line.startswith(("## ", "### ")):
            found.append(Printed(line.rstrip(), ()))
        elif found and line.startswith("|") and not previous.startswith("|"):
            columns = tuple(cell.strip() for cell in line.strip().strip("|").split("|"))
            found[-1] = found[-1]._replace(tables=(*found[-1].tables, columns))
        previous = line
    return found


def differences(markdown: str, complete: bool = True) -> list[str]:
    """How the sections of ``markdown`` differ from ALL, one line each (none: the same shape).
    ``complete``: every section must be there (a full run); else some may be left out."""
    problems = []
    declared = list(ALL)
    for printed in shape(markdown):
        skipped = []
        while declared and not declared[0].matches(printed.heading):
            skipped.append(declared.pop(0))
        if not declared:
            problems.append(f"{printed.heading!r}: no such section declared here (or not in "
                            "this order)")
            declared, skipped = skipped, []
            continue
        section = declared.pop(0)
        if complete:
            problems += [f"{s.template()!r}: missing" for s in skipped]
        if printed.tables != section.tables:
            problems.append(f"{printed.heading!r}: tables with columns {list(printed.tables)}, "
                            f"declared {list(section.tables)}")
    if complete:
        problems += [f"{s.template()!r}: missing" for s in declared]
    return problems
