#!/usr/bin/env python3
"""Mutation testing of the step check and the dump: hand-made faults (:data:`MUTANTS`), each
applied to a checkout in turn, the unit tests that concern it run, killed/total printed.

    python benchmarks/mutants.py                    # every mutant, on this checkout
    python benchmarks/mutants.py -k nonce -k spare  # the mutants whose id holds any of these
    python benchmarks/mutants.py --list             # the table, nothing run
    python benchmarks/mutants.py --root DIR --python DIR_VENV/bin/python   # another tree

Not run by the suite (about 30 minutes on 2 busy CPUs). Each mutant is one replacement of
a text that occurs exactly once in its file; where it does not (an older tree without that
code), the mutant is "n/a" and not counted. The file is restored after each mutant, also on
Ctrl-C or an error, and the run refuses to start when a file it mutates has uncommitted changes
(so ``git checkout`` would restore it). The tests run with ``-x``, fastest killers first; a
mutant is killed when they fail (or time out), survives when they pass. Every mutant changes
a behaviour some page promises (docs/step-check.md, docs/debugging.md, docs/fail-closed.md):
none is equivalent by construction.

Groups: ``issue`` are the faults issue 42 found surviving; ``old`` faults in code older than
issue 42; ``new`` faults in the code issue 42 added (the target: at least 95% killed).
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import time
from typing import NamedTuple

STEP = ("tests/test_stepcheck_guarantees.py", "tests/test_stepcheck.py",
        "tests/test_stepcheck_phases.py")
DUMP = ("tests/test_dump_secrets.py", "tests/test_dump.py", "tests/test_dump_safety.py")
SC = "slurmenv/doctor/stepcheck/"


class Mutant(NamedTuple):
    id: str
    group: str  # issue, old or new
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    # -- the step check: the faults issue 42 found surviving ---------------------------------
    Mutant("go-without-live-ack", "issue", SC + "rank0.py",
           "self.acked == len(self.outcome.arrivals) and not lost())", "not lost())", STEP),
    Mutant("task-obeys-another-job", "issue", SC + "task.py",
           'if not isinstance(ident, dict) or ident.get("job") != self.ident["job"]:',
           "if not isinstance(ident, dict):", STEP),
    Mutant("go-before-verdict-old", "issue", SC + "task.py",
           'elif got == "go" and self.phase == "acked":', 'elif got == "go":', STEP),
    Mutant("listening-after-go", "issue", SC + "rank0.py",
           "            self._stop_listening()  # the port is the training's",
           "            pass  # the port is the training's", STEP),
    Mutant("fd-limit-past-hard-cap", "issue", SC + "rank0.py",
           "new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)",
           "new = wanted", STEP),
    Mutant("fd-limit-never-restored", "issue", SC + "check.py",
           "        restore_fd_limit(old)", "        pass", STEP),
    Mutant("accept-not-resumed-after-emfile", "issue", SC + "rank0.py",
           "            self.paused = False  # a descriptor is free again",
           "            pass  # a descriptor is free again", STEP),
    Mutant("hello-without-nonce-counted", "issue", SC + "protocol.py",
           'if not isinstance(payload.get("task"), str):', "if False:", STEP),
    Mutant("slow-hello-dropped-with-room", "issue", SC + "rank0.py",
           'return self.phase != "gather" or len(self.conns) >=', "return True or len(self.conns) >=",
           STEP),
    Mutant("token-split-at-blanks-and-equals", "issue", "slurmenv/launchers/base.py",
           """re.split(r"[\\s=:,;@/'\\"]+", text)""", 're.split(r"[\\s=]+", text)', DUMP),
    # -- the step check: older code -----------------------------------------------------------
    Mutant("another-step-counted", "old", SC + "rank0.py",
           'return facts.get("job") != self.own["job"] or (', "return False and (", STEP),
    Mutant("late-task-does-not-abort", "old", SC + "rank0.py",
           'if self.phase == "acks":  # a task of this step after the verdict',
           "if False:  # a task of this step after the verdict", STEP),
    Mutant("duplicate-not-flagged", "old", SC + "reporting.py",
           "if count > 1:", "if count > 2:", STEP),
    Mutant("null-field-agrees", "old", SC + "protocol.py",
           "elif payload[key] is None:", "elif False:", STEP),
    Mutant("newline-kept-in-report", "old", SC + "protocol.py",
           'shown.replace("\\n", "\\\\n")', "shown", STEP),
    Mutant("oversize-waited-for", "old", SC + "protocol.py",
           "        if len(buffer) > MAX_MESSAGE:\n", "        if False:\n", STEP),
    Mutant("bad-verdict-starts", "old", SC + "task.py",
           'if got in ("verdict", "abort", "late", "other-step"):\n                return False',
           'if got in ("verdict", "abort", "late", "other-step"):\n                return True',
           STEP),
    Mutant("missing-rank-not-named", "old", SC + "reporting.py",
           "missing = [r for r in range(1, world) if r not in by_rank]", "missing = []", STEP),
    Mutant("lost-ack-not-waited", "old", SC + "rank0.py",
           "self.pump(min(deadline, time.monotonic() + SETTLE_SECONDS), lost)\n"
           "            self.pump(deadline, all_in)", "pass", STEP),
    Mutant("reattach-without-decision", "old", SC + "rank0.py",
           '        elif self.phase == "decided":\n            self._decide_one(arrival)',
           '        elif False:\n            self._decide_one(arrival)', STEP),
    # -- the step check: code added by issue 42 -----------------------------------------------
    Mutant("no-spare-places", "new", SC + "rank0.py",
           "self.cap = max(self.world, 2) + SPARE_PLACES", "self.cap = max(self.world, 2)", STEP),
    Mutant("crowding-not-recorded", "new", SC + "rank0.py",
           "self.outcome.crowded = max(self.outcome.crowded, len(self.pending))", "pass", STEP),
    Mutant("held-never-said", "new", SC + "reporting.py",
           "        if outcome.crowded:\n", "        if False:\n", STEP),
    Mutant("held-always-said", "new", SC + "reporting.py",
           "                    \"kernel's backlog; not blamed on its node\")\n        return None",
           "                    \"kernel's backlog; not blamed on its node\")\n        return \": x\"",
           STEP),
    Mutant("held-fd-limit-never-said", "new", SC + "reporting.py",
           "        if outcome.fd_limit is not None:\n            return", "        if False:\n"
           "            return", STEP),
    Mutant("held-node-still-blamed", "new", SC + "reporting.py",
           "if node and held is None:", "if node:", STEP),
    Mutant("held-text-dropped", "new", SC + "reporting.py",
           'f"connected to {self.where}" + (held or ""))', 'f"connected to {self.where}")', STEP),
    Mutant("late-from-backlog-blamed", "new", SC + "reporting.py",
           "None if held else arrival.facts.get(\"node\")", "arrival.facts.get(\"node\")", STEP),
    Mutant("strangers-at-end-not-counted", "new", SC + "rank0.py",
           '            self._refuse(conn, "said nothing valid before the check ended")',
           "            pass", STEP),
    Mutant("go-without-nonce", "new", SC + "rank0.py",
           "payload = message(str(self.outcome.decision), self.ident, line=line,\n"
           "                              task=arrival.task)",
           "payload = message(str(self.outcome.decision), self.ident, line=line)", STEP),
    Mutant("nonce-not-compared", "new", SC + "task.py",
           'if reply.get("task") != self.nonce:', "if False:", STEP),
    Mutant("identity-not-compared", "new", SC + "task.py",
           "differ = [k for k in fields if ident.get(k) != self.ident.get(k)]", "differ = []",
           STEP),
    Mutant("step-never-compared", "new", SC + "task.py",
           'self.compares_step = str(facts.get("launcher", "")).startswith("slurm")',
           "self.compares_step = False", STEP),
    Mutant("go-before-verdict", "new", SC + "task.py",
           ' if got == "go" and self.phase == "acked":', ' if got == "go":', STEP),
    Mutant("verdict-twice-acked", "new", SC + "task.py",
           'if got == "verdict" and self.phase == "hello":', 'if got == "verdict":', STEP),
    # -- the dump: older code -------------------------------------------------------------------
    Mutant("environ-not-redacted", "old", "slurmenv/dump/allowlist.py",
           "name: base.redact(name, str(environ[name]))", "name: str(environ[name])", DUMP),
    Mutant("credential-file-kept", "old", "slurmenv/dump/capture.py",
           "if any(base.looks_like_credential(run) for run in _printable_runs(data)):",
           "if False:", DUMP),
    Mutant("pseudo-file-read", "old", "slurmenv/dump/capture.py",
           "        if _on_pseudo_filesystem(path):  # before reading",
           "        if False:  # before reading", DUMP),
    # -- the dump: code added by issue 42 -------------------------------------------------------
    Mutant("record-not-scrubbed", "new", "slurmenv/dump/capture.py",
           "return scrub(data, env)", "return data", DUMP),
    Mutant("secret-values-ignored", "new", "slurmenv/dump/secrets.py",
           "        if value in text:\n", "        if False:\n", DUMP),
    Mutant("url-userinfo-kept", "new", "slurmenv/dump/secrets.py",
           '    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)\n', "", DUMP),
    Mutant("bare-userinfo-kept", "new", "slurmenv/dump/secrets.py",
           '    text = _BARE_USERINFO.sub(f"{REDACTED}@", text)\n', "", DUMP),
    Mutant("assignment-kept", "new", "slurmenv/dump/secrets.py",
           "    text = _ASSIGNMENT.sub(_assignment, text)\n", "", DUMP),
    Mutant("tokens-kept", "new", "slurmenv/dump/secrets.py",
           "    return _TOKEN.sub(REDACTED, text)", "    return text", DUMP),
    Mutant("token-only-at-word-start", "new", "slurmenv/dump/secrets.py",
           '_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:"',
           '_TOKEN = re.compile(r"(?<![^\\s=:,;@/\'\\"])(?:"', DUMP),
    Mutant("keys-not-scrubbed", "new", "slurmenv/dump/secrets.py",
           "{self.text(str(k)): self.walk(v)", "{str(k): self.walk(v)", DUMP),
    Mutant("lists-not-scrubbed", "new", "slurmenv/dump/secrets.py",
           "            return [self.walk(v) for v in value]", "            return list(value)",
           DUMP),
    Mutant("plain-lists-hold-text", "new", "slurmenv/dump/secrets.py",
           "_PLAIN = frozenset((int, float, bool, type(None)))",
           "_PLAIN = frozenset((int, float, bool, type(None), str))", DUMP),
    Mutant("trigger-misses-colon", "new", "slurmenv/dump/secrets.py",
           '_TRIGGER = re.compile(r"[@=:]|"', '_TRIGGER = re.compile(r"[@=]|"', DUMP),
    Mutant("environ-redactions-not-counted", "new", "slurmenv/dump/secrets.py",
           "out[\"redacted\"] = scrubber.changed + sum(", "out[\"redacted\"] = scrubber.changed + 0 * sum(",
           DUMP),
    Mutant("redacted-not-loaded", "new", "slurmenv/dump/replay.py",
           'redacted=_count(data, "redacted", path),', "redacted=0,", DUMP),
    Mutant("redacted-count-unchecked", "new", "slurmenv/dump/replay.py",
           "    if not _is_int(value) or value < 0:\n        raise _bad(path, f\"'{key}' is not a count\")",
           "    if False:\n        raise _bad(path, f\"'{key}' is not a count\")", DUMP),
    Mutant("redaction-not-said-in-replay", "new", "slurmenv/dump/replay.py",
           "    if dump.redacted:\n", "    if False:\n", DUMP),
)


def run_one(mutant: Mutant, root: pathlib.Path, python: str, timeout: float) -> str:
    """'killed', 'survived' or 'n/a' (the text to mutate is not in the file exactly once)."""
    path = root / mutant.file
    original = path.read_text() if path.exists() else ""
    if original.count(mutant.old) != 1:
        return "n/a"
    tests = [t for t in mutant.tests if (root / t).exists()]
    try:
        path.write_text(original.replace(mutant.old, mutant.new))
        try:
            done = subprocess.run([python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                   *tests], cwd=root, capture_output=True, text=True, check=False,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return "killed"  # a hang the tests notice
        if done.returncode not in (0, 1):
            sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])
            raise SystemExit(f"{mutant.id}: pytest could not run (status {done.returncode})")
        return "survived" if done.returncode == 0 else "killed"
    finally:
        path.write_text(original)
        for cache in path.parent.glob(f"__pycache__/{path.stem}.*.pyc"):
            cache.unlink()


def clean(root: pathlib.Path, files: set[str]) -> bool:
    if not (root / ".git").exists():
        return True
    done = subprocess.run(["git", "diff", "--quiet", "--", *sorted(files)], cwd=root, check=False)
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter whose slurmenv is the tree's (tests/checkout.py)")
    parser.add_argument("-k", action="append", default=[], help="only mutants whose id holds it")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.k or any(k in m.id for k in args.k)]
    if args.list:
        for m in chosen:
            print(f"{m.group:6} {m.id:36} {m.file}")
        return 0
    if not clean(args.root, {m.file for m in chosen}):
        raise SystemExit("a file to mutate has uncommitted changes: commit or stash them first")
    results: dict[str, list[tuple[Mutant, str]]] = {}
    for m in chosen:
        start = time.monotonic()
        outcome = run_one(m, args.root, args.python, args.timeout)
        print(f"{outcome:8} {m.group:6} {m.id:36} {time.monotonic() - start:6.1f} s", flush=True)
        results.setdefault(m.group, []).append((m, outcome))
    total_killed = total = 0
    for group, rows in results.items():
        counted = [o for _, o in rows if o != "n/a"]
        killed = counted.count("killed")
        total_killed += killed
        total += len(counted)
        score = f"{100 * killed / len(counted):.0f}%" if counted else "-"
        survivors = ", ".join(m.id for m, o in rows if o == "survived")
        print(f"{group}: {killed}/{len(counted)} killed ({score})"
              + (f"; n/a {len(rows) - len(counted)}" if len(counted) < len(rows) else "")
              + (f"; survived: {survivors}" if survivors else ""))
    if total:
        print(f"all: {total_killed}/{total} killed ({100 * total_killed / total:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
