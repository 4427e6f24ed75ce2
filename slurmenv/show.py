"""``slurmenv show``: every value of this task with the variables it came from."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .cli import add_resolution_options, print_error, resolve_from_args
from .errors import SlurmEnvError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slurmenv show", description="Show this task's values and where each came from."
    )
    add_resolution_options(parser)
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        res = resolve_from_args(args)
        values = res.env(args.for_)
    except SlurmEnvError as exc:
        print_error(exc)
        return 1
    where = f"job {res.job_id} step {res.step_id}" if res.job_id else "no Slurm job"
    out = [f"launcher: {res.launcher} ({where}), task on {res.hostname}"]
    width = max(len(name) for name in values)
    for name, value in values.items():
        out.append(f"{name:<{width}}  {value}")
        source = res.sources.get(name)
        if source:
            out.append(f"{'':<{width}}    from {source}")
    out.extend(f"note: {note}" for note in res.notes)
    sys.stdout.write("\n".join(out) + "\n")
    return 0
