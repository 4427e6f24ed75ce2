"""``slurmenv doctor``: the command line (parse, probe this node or load a dump, print)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .. import ports, render, resolve
from ..doctor.checks import diagnose, outputs_to_check, replay
from ..doctor.report import format_report, to_json, use_colour
from ..dump.probe import probe, resolve_for_doctor
from ..errors import SlurmEnvError
from ..options import given_in
from .console import (
    add_resolution_options,
    argument_parser,
    fail_closed,
    print_error,
    usage_error,
    write_output,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argument_parser(
        prog="slurmenv doctor",
        description="Check this task for what makes distributed training hang at start-up; "
        "each check says ok, warning or error, with a fix. Exit status 0 when no error. "
        "Run it in the training step itself: srun -K sh -c 'slurmenv doctor && "
        "exec slurmenv exec -- python train.py'",
    )
    parser.add_argument("--json", action="store_true", help="JSON instead of text")
    parser.add_argument("--from", dest="from_file", metavar="FILE",
                        help="diagnose a file written by 'slurmenv dump' (node facts only if it "
                        "was taken with --probe)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print only warnings, errors and a one-line summary")
    parser.add_argument("--export-ifname", action="store_true",
                        help="print export lines for NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME "
                        "on stdout (for eval) and the problems on stderr")
    parser.add_argument("--shell", choices=render.SHELLS, default="sh",
                        help="syntax of --export-ifname (default sh)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the verdicts (auto: only on a terminal)")
    parser.add_argument(
        "--step", action="store_true",
        help="check the whole step instead of this task: run in every task (srun slurmenv "
        "doctor --step); rank 0 listens on MASTER_PORT, every task reaches it and says what it "
        "resolved; rank 0 reports missing, duplicate and disagreeing ranks. Exit status 1 in "
        "every task when the step is not sound",
    )
    parser.add_argument("--step-timeout", metavar="SECONDS", default=None,
                        help="how long the step check waits for the other tasks "
                        "(SLURMENV_STEP_TIMEOUT, default 30)")
    add_resolution_options(parser)
    return parser


def step(options: Mapping[str, Any], timeout: str | None, from_file: str | None) -> int:
    """``doctor --step``: the step check (slurmenv.doctor.stepcheck) in this task."""
    from ..doctor.stepcheck.check import main_for, timeout_from

    if from_file:
        usage_error("--step checks a running step: it cannot replay a dump (--from)")
    try:
        seconds = timeout_from(os.environ, timeout)
        res = resolve(**options)
    except SlurmEnvError as exc:
        print_error(exc)
        return 1
    return main_for(res, options, seconds)


def main(argv: Sequence[str]) -> int:
    """``slurmenv doctor``; returns 1 when any check gives an error, else 0."""
    from ..dump.replay import load

    args = build_parser().parse_args(argv)
    options = given_in(args)
    if args.step:
        return step(options, args.step_timeout, args.from_file)
    if args.step_timeout is not None:
        usage_error("--step-timeout is the step check's: give it with --step "
                    "(slurmenv doctor --step --step-timeout N), or drop it")
    if args.from_file:
        try:
            loaded = load(args.from_file)
        except SlurmEnvError as exc:
            print_error(exc)
            return 2
        report = replay(loaded, options, args.for_)
        report = report._replace(title=f"{report.title} [replayed from {args.from_file}]")
    else:
        res, _ = resolve_for_doctor(os.environ, options)
        facts = probe(os.environ, options, res)
        report = diagnose(os.environ, options, ephemeral=ports.ephemeral_range(), facts=facts,
                          for_=outputs_to_check(os.environ, args.for_))
    status = 1 if report.errors else 0
    if args.export_ifname:
        if report.errors or report.warnings:  # silent when all is well: it runs in every task
            sys.stderr.write(format_report(report, use_colour(args.color, sys.stderr), quiet=True))
        if report.ifname is None:
            sys.stderr.write("slurmenv: error: no interface to export (see the checks above)\n")
            fail_closed(args.shell)  # eval $(slurmenv doctor --export-ifname) must stop too
            return 1
        return write_output(render.render(report.ifname, args.shell)) or status
    if args.json:
        return write_output(to_json(report)) or status
    tty = bool(getattr(sys.stdout, "isatty", lambda: False)())
    width = shutil.get_terminal_size().columns if tty else None
    colour = use_colour(args.color, sys.stdout)
    return write_output(format_report(report, colour, quiet=args.quiet, width=width)) or status
