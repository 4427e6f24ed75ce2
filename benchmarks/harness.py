"""The statistics harness of the benchmarks: commands and calls timed side by side, medians,
spreads and paired ratios, peak memory, and Markdown tables.

Every figure is a median over many runs, printed with its spread: the interquartile range
``(q1–q3)`` of the same runs. The commands of a table alternate (their order rotates and
reverses from round to round); ratios are medians of the per-round ratios against the
reference measured in the same round, in wall-clock time and in CPU time (user + system,
children included: less disturbed by other load on a small machine).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence

CPU = " (cpu)"  # key suffix of CPU times in alternate()'s result
FAULTS = " (faults)"  # key suffix of in_process()'s minor page faults per call


class WrongAnswer(Exception):
    """slurmenv (not the machine) failed: a bug, never noise."""


# --- measuring ---------------------------------------------------------------------------------

def alternate(
    commands: dict[str, Sequence[str]], env: dict[str, str], rounds: int, warmup: int
) -> dict[str, list[float]]:
    """Run every command once per round, in a rotating, alternating order.

    Returns seconds per run: wall-clock time under each command's name, and CPU time (user +
    system, children included) under ``name + CPU``.
    """
    names = list(commands)
    times: dict[str, list[float]] = {key: [] for name in names for key in (name, name + CPU)}
    for r in range(warmup + rounds):
        shift = r % len(names)
        order = names[shift:] + names[:shift]
        if r % 2:
            order.reverse()
        for name in order:
            start = time.perf_counter()
            proc = subprocess.Popen(
                commands[name], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            _, status, usage = os.wait4(proc.pid, 0)
            elapsed = time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                raise WrongAnswer(f"{name}: exit status {proc.returncode}")
            if r >= warmup:
                times[name].append(elapsed)
                times[name + CPU].append(usage.ru_utime + usage.ru_stime)
    return times


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(q1, median, q3) of ``values``: the median and its spread (the interquartile range)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def paired_ratios(times: dict[str, list[float]], name: str, base: str) -> list[float]:
    """``name``'s time over ``base``'s in the same round, for every round."""
    return [a / b for a, b in zip(times[name], times[base])]


def paired_ratio(times: dict[str, list[float]], name: str, base: str) -> float:
    """Median over the rounds of ``name``'s time over ``base``'s in the same round."""
    return statistics.median(paired_ratios(times, name, base))


def with_spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """``median (q1–q3)``."""
    q1, q2, q3 = quartiles(values)
    return f"{fmt(q2)} ({fmt(q1)}–{fmt(q3)})"


def times_x(value: float) -> str:
    return f"{value:.2f}"


def ratios(times: dict[str, list[float]], name: str, bare: str | None, floor: str) -> list[str]:
    """Table cells: median wall time, × bare interpreter, × floor (wall), × floor (CPU); each
    with its interquartile range over the rounds."""
    return [
        with_spread(times[name], ms),
        "-" if bare is None or floor.endswith(" again")
        else with_spread(paired_ratios(times, name, bare), times_x),
        with_spread(paired_ratios(times, name, floor), times_x),
        with_spread(paired_ratios(times, name + CPU, floor + CPU), times_x),
    ]


def in_process(
    fns: dict[str, tuple[Callable[[], object], Callable[[object], object]]], rounds: int
) -> dict[str, list[float]]:
    """Like alternate(), for ``(prepare, run)`` pairs called in this process: only
    ``run(prepare())`` is timed, in wall-clock time and (under ``name + CPU``) in this
    process's CPU time; ``name + FAULTS``: the minor page faults of each call (pages of new
    memory the system gave the process)."""
    names = list(fns)
    times: dict[str, list[float]] = {key: [] for name in names
                                     for key in (name, name + CPU, name + FAULTS)}
    for r in range(rounds):
        shift = r % len(names)
        order = names[shift:] + names[:shift]
        if r % 2:
            order.reverse()
        for name in order:
            prepare, run = fns[name]
            arg = prepare()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start, start_cpu = time.perf_counter(), time.process_time()
            result = run(arg)
            times[name + CPU].append(time.process_time() - start_cpu)
            times[name].append(time.perf_counter() - start)
            times[name + FAULTS].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
            del result, arg  # freed outside the timed region
    return times


def peak_rss_kib(cmd: Sequence[str], env: dict[str, str]) -> tuple[int, str]:
    """Peak resident memory of a process (KiB, median of 3 runs) and its output.

    Measured by GNU time, whose own few MiB are what a child inherits before its exec:
    measured from this (large) process, ru_maxrss would report this process's size.
    """
    gnu_time = shutil.which("time", path="/usr/bin:/bin")
    if gnu_time is None:
        raise RuntimeError("GNU time (/usr/bin/time) is not installed")
    peaks, output = [], ""
    with tempfile.NamedTemporaryFile("r") as report:
        for _ in range(3):
            out = subprocess.run([gnu_time, "-f", "%M", "-o", report.name, *cmd], env=env,
                                 capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise WrongAnswer(f"{cmd}: exit status {out.returncode}: {out.stderr[-500:]}")
            report.seek(0)
            peaks.append(int(report.read().split()[-1]))
            output = out.stdout
    return int(statistics.median(peaks)), output


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds >= 0.001 else f"{seconds * 1e6:.0f} µs"


def met(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
    return "\n".join(lines)


# --- the benchmark -----------------------------------------------------------------------------
