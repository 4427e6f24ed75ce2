"""Claims of the docs that a page states in prose, held by the code or run as written: the
limits a page gives are the code's constants, and the examples of docs/fail-closed.md that
show an exit status run here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import synth

import slurmenv
from slurmenv import nodes, options

ROOT = Path(__file__).resolve().parent.parent


def page(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


# -- limits are the code's ---------------------------------------------------------------------
def test_the_node_list_limit_is_the_codes() -> None:
    limit = f"{nodes.MAX_NODES:,}"
    for name in ("docs/testing.md", "docs/layouts.md"):
        assert limit in page(name), name
    assert "over 100,000 names refused" not in page("docs/testing.md")


# -- no test measures a speed ---------------------------------------------------------------------
CLOCKS = re.compile(r"\btime\.(?:monotonic|time|perf_counter)(?:_ns)?\(|\bperf_counter\(")


def test_no_test_measures_wall_clock_time() -> None:
    """docs/testing.md: no test asserts a speed (benchmarks/ measures it). The clock is read
    only for a deadline that bounds a wait (a line naming ``deadline``: a hang fails the test
    instead of blocking the suite), and by the cluster harness for its own deadlines."""
    found = [f"{path.name}:{number}" for path in sorted((ROOT / "tests").glob("*.py"))
             if path.name not in ("slurm_harness.py", Path(__file__).name)
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if CLOCKS.search(line) and "deadline" not in line]
    assert not found, f"a test reads the clock (assert behaviour, not time): {found}"


# -- README: which command takes which option -----------------------------------------------------
def test_the_readme_says_which_command_takes_which_option() -> None:
    """As docs/options.md (generated from the table) says: every option for the resolving
    commands, the ones marked torchrun for slurmenv torchrun."""
    text = " ".join(page("README.md").split())
    every = re.search(r"`export`, `exec`, `show`, `doctor` and `dump` take the options (.*?);", text)
    torchrun = re.search(r"`slurmenv torchrun` takes (`--.*?)\.", text)
    assert every and torchrun, "README.md: the sentence naming each command's options"
    flags = {row.flag for row in options.TABLE}
    assert set(re.findall(r"`(--[\w-]+)`", every.group(1))) == flags
    assert set(re.findall(r"`(--[\w-]+)`", torchrun.group(1))) == {
        row.flag for row in options.TABLE if row.torchrun}
    assert "Every resolving command takes" not in text


# -- docs/fail-closed.md: tool settings alone ----------------------------------------------------
TOOL_SETTINGS = {
    "SLURM_CONF": "/etc/slurm/slurm.conf", "OMPI_MCA_btl": "tcp,self", "I_MPI_FABRICS": "shm",
    "HYDRA_BOOTSTRAP": "ssh", "PMIX_MCA_gds": "hash", "MV2_ENABLE_AFFINITY": "0",
    "KUBERNETES_SERVICE_HOST": "10.96.0.1", "PET_NPROC_PER_NODE": "1", "PET_MASTER_PORT": "23456",
    "SLURMENV_THREADS": "0",
}


def resolve(environ: dict[str, str]) -> slurmenv.Resolution:
    return slurmenv.resolve(environ, ephemeral_range=None, step_evidence=None, rivals=None)


def test_tool_settings_alone_give_a_single_process() -> None:
    res = resolve(dict(TOOL_SETTINGS))
    assert (res.rank, res.world_size, res.master_addr) == (0, 1, "127.0.0.1")
    for name, value in TOOL_SETTINGS.items():
        assert resolve({name: value}).world_size == 1, name


@pytest.mark.parametrize("nnodes", ["1", "2"])
def test_except_a_kubeflow_pod_without_its_node_rank(nnodes: str) -> None:
    with pytest.raises(slurmenv.SlurmEnvError) as info:
        resolve({**TOOL_SETTINGS, "PET_NNODES": nnodes})
    assert info.value.variable == "PET_NODE_RANK"
    assert "`KUBERNETES_SERVICE_HOST` and `PET_NNODES` together" in page("docs/fail-closed.md")


# -- docs/fail-closed.md: the reader going away --------------------------------------------------
def head_c_7(environ: dict[str, str], *words: str) -> int:
    """The exit status of slurmenv in ``slurmenv export WORDS | head -c 7``, run by bash."""
    bindir = str(Path(sys.executable).parent)
    env = {**environ, "PATH": f"{bindir}:/usr/bin:/bin"}
    script = f'slurmenv export {" ".join(words)} | head -c 7 >/dev/null; echo "${{PIPESTATUS[0]}}"'
    proc = subprocess.run(
        ["bash", "-c", script],
        env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.strip().isdigit(), proc.stderr
    return int(proc.stdout)


def test_a_reader_that_goes_away_early_is_exit_status_1() -> None:
    hosts = [f"n{i:04d}" for i in range(1500)]
    env = synth.step_env(hosts, [4] * len(hosts), 5)
    res = resolve(env)
    assert res.world_size == 6000 and len(res.env("tf")["TF_CONFIG"]) > 64 * 1024
    text = page("docs/fail-closed.md")
    assert "`slurmenv export --for tf \\| head -c 7` in a step of 6,000 tasks" in text
    assert head_c_7(env, "--for", "tf") == 1


def test_an_output_that_fits_the_pipe_is_written_whole() -> None:
    assert "`slurmenv export | head -c 7` in an ordinary step exits 0" in " ".join(
        page("docs/fail-closed.md").split())
    assert head_c_7(synth.step_env(["n1", "n2"], [2, 2], 3)) == 0


# -- docs/testing.md: what the real cluster does not show ----------------------------------------
def test_the_exceptions_testing_md_names_are_the_harness_configuration() -> None:
    """testing.md says the cgroup evidence is not exercised because the test cluster runs no
    cgroup plugin: true while the harness configures proctrack/linuxproc and task/none."""
    harness = page("tests/slurm_harness.py")
    text = page("docs/testing.md")
    assert "ProctrackType=proctrack/linuxproc" in harness and "TaskPlugin=task/none" in harness
    assert "`proctrack/linuxproc`" in text and "`task/none`" in text
    assert "`tests/test_real_topology.py`" in text
    assert "slurm_topology_cluster" in page("tests/test_real_topology.py")


# -- every exit status a page states is held by a test ---------------------------------------
#: (page, words of the claim) -> the tests that assert that exit status
EXIT_STATUSES = {
    ("docs/debugging.md", "and exits with status 1"):
        ["test_show.py::test_one_line_error_sorts_in_place"],
    ("docs/doctor.md", "The exit status is 0 when no check gives an error"):
        ["test_doc_claims.py::test_doctor_exit_status"],
    ("docs/api.md", "so the task can exit with status 0 and the step end"):
        ["test_tf_roles.py::test_serve_returns_once_the_chief_stops_listening",
         "test_real_tf_roles.py::test_parameter_server_training_ends_with_the_chief"],
    ("docs/frameworks/tensorflow.md", "The servers then exit with status 0, and the step with it"):
        ["test_real_tf_roles.py::test_parameter_server_training_ends_with_the_chief"],
    ("docs/debugging.md", "# a report, exit status 1 if not sound"):
        ["test_stepcheck.py::test_doctor_step_prints_the_report_and_exits_1_when_not_sound"],
    ("docs/step-check.md", "Every task exits with status 1 when the step is not sound"):
        ["test_stepcheck.py::test_doctor_step_prints_the_report_and_exits_1_when_not_sound",
         "test_stepcheck.py::test_exec_preflight_starts_the_command_only_in_a_sound_step",
         "test_real_stepcheck.py::test_kill_on_bad_exit_ends_the_step"],
    ("docs/options.md", "Exit status 1 in every task when the step is not sound"):
        ["test_stepcheck.py::test_doctor_step_prints_the_report_and_exits_1_when_not_sound"],
    ("docs/debugging.md", "(`dump` exits 0)"):
        ["test_dump.py::test_an_error_is_recorded_and_replayed"],
    ("docs/design.md", "write_output (all of it, or exit status 1)"):
        ["test_ending.py::test_a_full_disk_is_an_error_not_a_traceback"],
    ("docs/fail-closed.md", "(exit status 70;"):
        ["test_cli_failures.py::test_a_bug_prints_the_failure_line_and_a_short_message"],
    ("docs/fail-closed.md", "how to raise the limit (exit status 1)"):
        ["test_cli_failures.py::test_running_out_of_memory_is_the_jobs_limit_not_a_bug"],
    ("docs/fail-closed.md", "Every command writes its output whole or exits 1"):
        ["test_ending.py::test_a_full_disk_is_an_error_not_a_traceback",
         "test_ending.py::test_output_cut_short_by_a_file_size_limit_is_an_error",
         "test_ending.py::test_a_closed_stdout_is_an_error_not_a_bug_report"],
    ("docs/fail-closed.md", "64 KiB buffer) | exit status 1, nothing more said"):
        ["test_doc_claims.py::test_a_reader_that_goes_away_early_is_exit_status_1",
         "test_ending.py::test_a_reader_that_goes_away_ends_the_command_quietly"],
    ("docs/fail-closed.md", "(`ulimit -f`) | exit status 1"):
        ["test_ending.py::test_output_cut_short_by_a_file_size_limit_is_an_error"],
    ("docs/fail-closed.md", "(`slurmenv export >&-`) | exit status 1"):
        ["test_ending.py::test_a_closed_stdout_is_an_error_not_a_bug_report"],
    ("docs/fail-closed.md", "in an ordinary step exits 0"):
        ["test_doc_claims.py::test_an_output_that_fits_the_pipe_is_written_whole"],
    ("docs/layouts.md", "exits with status 0 and no output"):
        ["test_scale.py::test_scontrol_writes_ranges_it_cannot_read"],
    ("docs/shells.md", "The exit status is 1 and the reason"):
        ["test_export_cli.py::test_failure_prints_nothing_that_sets_variables"],
    ("docs/shells.md", "exit **a script** with status 1"):
        ["test_shells.py::test_failure_stops_a_script_before_its_next_command"],
    ("docs/testing.md", "stops with exit status 1 unless"):
        ["test_doc_claims.py::test_another_checkout_stops_the_session_with_status_1"],
    ("README.md", "When slurmenv refuses, it exits 1"):
        ["test_shells.py::test_task_form_starts_nothing_when_slurmenv_refuses"],
    ("README.md", "the substitution fails with status 127"):
        ["test_shells.py::test_task_form_starts_nothing_when_slurmenv_is_missing",
         "test_real_docs_claims.py::test_taking_the_output_first_fails_closed"],
    ("docs/doctor.md", "Its exit status is 1 when a check found an error"):
        ["test_doctor.py::test_export_ifname_exits_1_on_an_error_and_the_form_starts_nothing"],
    ("docs/doctor.md", "(on stdout) and exits 1"):
        ["test_doctor.py::test_export_ifname_without_an_interface_prints_the_stop_line_and_exits_1"],
    ("docs/fail-closed.md", "a refusal exits with status 1 and the reason"):
        ["test_export_cli.py::test_exec_does_not_run_the_command_on_failure"],
    ("docs/torchrun.md", "stops the line with status 127 and a refusal with status 1"):
        ["test_shells.py::test_task_form_starts_nothing_when_slurmenv_is_missing",
         "test_shells.py::test_task_form_starts_nothing_when_slurmenv_refuses"],
    ("docs/torchrun.md", "The exit status is still 0."):
        ["test_real_torchrun.py::test_slurmenv_torchrun_two_nodes_two_workers"],
}
#: pages another change owns (their exit statuses are tested there: tests/test_real_task_prolog.py)
EXIT_STATUS_ELSEWHERE = ("docs/task-prolog.md", "docs/CHANGELOG.md")
#: mentions that state no status (advice)
NOT_A_STATUS = {("docs/fail-closed.md", "check the exit status before you source it")}
STATUS_WORDS = re.compile(r"exit status|exits (?:with status )?\d|with status \d|\bexit \$\?")


def test_every_exit_status_a_page_states_is_tested() -> None:
    claimed = {(name, " ".join(words.split())) for name, words in EXIT_STATUSES} | NOT_A_STATUS
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        name = str(path.relative_to(ROOT))
        if name in EXIT_STATUS_ELSEWHERE:
            continue
        text = " ".join(path.read_text(encoding="utf-8").split())
        for match in STATUS_WORDS.finditer(text):
            around = text[max(0, match.start() - 80):match.end() + 80]
            assert any(page_name == name and words in around for page_name, words in claimed), (
                f"{name}: '...{around}...' states an exit status: name its test in EXIT_STATUSES")
    for (name, words), tests in EXIT_STATUSES.items():
        assert " ".join(words.split()) in " ".join(page(name).split()), (name, words)
        for test in tests:
            file, function = test.split("::")
            assert f"def {function}(" in page(f"tests/{file}"), test


def test_doctor_exit_status() -> None:
    """docs/doctor.md: 0 when no check gives an error, 1 otherwise."""
    def doctor(dump: str) -> int:
        return subprocess.run([sys.executable, "-m", "slurmenv", "doctor", "--from",
                               str(ROOT / "tests" / "dumps" / dump)], capture_output=True,
                              timeout=120, check=False).returncode

    assert doctor("healthy-rank5.json") == 0
    assert doctor("batch-script.json") == 1


def test_another_checkout_stops_the_session_with_status_1(tmp_path: Path) -> None:
    """docs/testing.md: a session that would import another clone's slurmenv stops, status 1."""
    import test_checkout

    clone = test_checkout._clone(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_checkout.py::test_this_checkout_is_tested"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(clone)}, capture_output=True, text=True,
        timeout=300, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "not testing this checkout" in proc.stdout + proc.stderr


# -- docs/troubleshooting.md: symptoms point at real doctor checks -------------------------------
def test_every_symptom_names_a_real_doctor_check() -> None:
    """Each entry of "By symptom" names at least one check, by the label doctor prints, and
    every `label` it names in "check(s) ..." is a registered check's."""
    from slurmenv.doctor import checks, registry

    assert checks.diagnose is not None  # registers the checks
    labels = {entry.label for entry in registry.ENTRIES}
    text = page("docs/troubleshooting.md")
    section = text.split("## By symptom", 1)[1].split("\n## ", 1)[0]
    entries = [e for e in section.split("\n- ")[1:]]
    for symptom in ("hangs at `init_process_group`", "Every rank says it is rank 0",
                    "`Address already in use`"):
        assert any(symptom in e for e in entries), symptom
    for entry in entries:
        flat = " ".join(entry.split())
        named = re.findall(r"[Cc]heck(?:s)? `([^`]+)`|`([^`]+)` \(", flat)
        named = [a or b for a, b in named]
        assert [n for n in named if n in labels], f"names no doctor check: {flat[:80]}"
        cited = re.findall(r"[Cc]heck(?:s)? `([^`]+)`", flat)
        assert set(cited) <= labels, (cited, labels)


def test_the_variable_table_names_every_variable_slurmenv_sets() -> None:
    """docs/variables.md has a row for every variable of every --for set."""
    rows = [line for line in page("docs/variables.md").splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`",
                                                          row.split("|")[1])}
    every = {name for names in slurmenv.OUTPUTS.values() for name in names}
    assert named == every


# -- docs/options.md: every option and variable of every command ---------------------------------
def test_options_md_names_every_option_of_every_command_and_every_variable() -> None:
    """The page promises every option of every command (from the parsers) and every
    SLURMENV variable: each SLURMENV name in slurmenv's source is on it, and each option the
    completion scripts offer (read from the same parsers) is on it."""
    from slurmenv.commands import completion

    text = page("docs/options.md")
    source = " ".join(p.read_text(encoding="utf-8") for p in (ROOT / "slurmenv").rglob("*.py"))
    variables = set(re.findall(r"[\"'](SLURMENV(?:_[A-Z_]+)?)[\"']", source))
    assert {"SLURMENV_STEP_TIMEOUT", "SLURMENV_DEBUG", "SLURMENV_PORT"} <= variables
    assert [v for v in sorted(variables) if f"`{v}`" not in text] == []
    flags = {name for command in completion.commands() for option in command.options
             for name in option.names if name.startswith("--")}
    assert {"--preflight", "--step-timeout", "--one-line", "--probe", "--dry-run"} <= flags
    assert [f for f in sorted(flags) if f"`{f}" not in text and f != "--help"] == []


def test_testing_md_lists_the_debian_packages_run_sh_installs() -> None:
    script = page("tests/run.sh")
    loop = re.search(r"for pkg in (.*?); do", script, re.DOTALL)
    assert loop is not None
    installed = loop.group(1).replace("\\\n", " ").split()
    text = " ".join(page("docs/testing.md").split())
    listed = re.search(r"installs the packages `([^`]*)` that are missing", text)
    assert listed is not None and [*listed.group(1).split(), "$build_packages"] == installed
    builds = re.search(r'build_packages="([^"]+)"', script)
    assert builds is not None and f"`$build_packages`: `{builds.group(1)}`" in text


def test_doctor_colours_as_debugging_md_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """debugging.md: colour only on a terminal and never with NO_COLOR, unless --color always."""
    from slurmenv.doctor import report

    class Terminal:
        def isatty(self) -> bool:
            return True

    assert "unless `--color always` asks for colour" in " ".join(page("docs/debugging.md").split())
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert report.use_colour("auto", Terminal()) and not report.use_colour("auto", object())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not report.use_colour("auto", Terminal()) and report.use_colour("always", object())


# -- docs/variables.md: who reads each variable, in the frameworks' own sources ------------------
#: (package, file in it) whose source the page names -> the variables the page says it reads
READERS = {
    ("torch", "distributed/rendezvous.py"): ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"),
    ("accelerate", "state.py"): ("LOCAL_RANK", "WORLD_SIZE"),
    ("lightning", "fabric/plugins/environments/lightning.py"): (
        "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"),
    ("tensorflow", "python/distribute/cluster_resolver/tfconfig_cluster_resolver.py"): (
        "TF_CONFIG",),
}
#: how the page names each package's reader
NAMED = {"torch": "torch/distributed/rendezvous.py", "accelerate": "accelerate/state.py",
         "lightning": "LightningEnvironment", "tensorflow": "TFConfigClusterResolver"}


@pytest.mark.parametrize("where", list(READERS), ids=lambda w: w[0])
def test_the_readers_variables_md_names_read_them(where: tuple[str, str]) -> None:
    """Read where the page says, at the installed versions (tests/versions.txt; the package's
    files are read, not imported): each name is a string in the reader's source."""
    import importlib.util

    package, file = where
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed (tests/run.sh installs it)")
    source = (Path(next(iter(spec.submodule_search_locations))) / file).read_text(encoding="utf-8")
    assert [name for name in READERS[where]
            if f"'{name}'" not in source and f'"{name}"' not in source] == []
    assert NAMED[package] in page("docs/variables.md")
