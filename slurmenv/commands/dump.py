"""``slurmenv dump``: the command line (parse, collect, write the file)."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Sequence

from ..dump.capture import DEFAULT_OUTPUT, collect, expand_output, write_new
from ..options import given_in
from .console import add_resolution_options, argument_parser, usage_error, write_output


def build_parser() -> argparse.ArgumentParser:
    parser = argument_parser(
        prog="slurmenv dump",
        description="Write what slurmenv reads in this task (no secrets) to a JSON file that "
        "'slurmenv show --from FILE' and 'slurmenv doctor --from FILE' replay anywhere. "
        "Run it where the problem is: srun slurmenv dump",
    )
    parser.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="FILE",
                        help=f"file to write, '-' for stdout; %%j job, %%s step, %%t rank, %%n "
                        f"node index, %%N host name (default {DEFAULT_OUTPUT.replace('%', '%%')})")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing file (never through a symbolic link)")
    parser.add_argument("--probe", action="store_true",
                        help="also record the node facts doctor checks (DNS answer for the "
                        "master, interfaces, listening ports, CPUs): one DNS lookup per task")
    add_resolution_options(parser, outputs=False)  # --for is refused (main)
    return parser


def main(argv: Sequence[str]) -> int:
    """``slurmenv dump``: returns the exit status (0 even when resolution fails: it is recorded)."""
    args = build_parser().parse_args(argv)
    if args.for_:  # a dump records every output (or why one is refused): the replay chooses
        usage_error("dump records every output: give --for to the replay instead "
                    "(slurmenv show --from FILE --for ..., slurmenv doctor --from FILE --for ...)")
    data = collect(options=given_in(args), probe=args.probe)
    text = json.dumps(data, indent=1, sort_keys=False) + "\n"
    if args.output == "-":
        return write_output(text)
    path = expand_output(args.output, os.environ, data["resolution"].get("summary"))
    try:
        write_new(path, text, args.force)
    except FileExistsError:
        sys.stderr.write(f"slurmenv: error: {path} exists: give another -o, or --force to "
                         "replace it\n")
        return 1
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        sys.stderr.write(f"slurmenv: error: cannot write {path}: {why}\n")
        return 1
    outcome = "error recorded" if "error" in data["resolution"] else "resolved"
    sys.stderr.write(f"slurmenv: wrote {path} ({outcome})\n")
    return 0
