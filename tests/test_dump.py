"""``slurmenv dump`` and the replay (``show --from``, ``doctor --from``).

Synthetic environments here; tests/dumps/ holds dumps taken on the real test cluster (by
tests/test_real_debugging.py with UPDATE_DUMPS=1), replayed below on this machine.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import re
import string
from collections.abc import Mapping
from typing import Any

import pytest
import synth
from hypothesis import given, settings
from hypothesis import strategies as st

import slurmenv
from slurmenv import doctor, dump, launchers
from slurmenv.commands.main import main
from slurmenv.doctor.context import NOT_RECORDED
from slurmenv.launchers import base

HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
PACKAGE = pathlib.Path(slurmenv.__file__).parent
DUMPS = pathlib.Path(__file__).parent / "dumps"


def use_env(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    keep = synth.clean_env()
    for name in list(os.environ):
        if name not in keep:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def write(data: dict[str, Any], path: pathlib.Path) -> str:
    path.write_text(json.dumps(data))
    return str(path)


# -- what a dump holds ----------------------------------------------------------------------
def test_only_variables_slurmenv_reads_and_no_secrets() -> None:
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 1)
    env.update({
        "HOME": "/home/alice", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "GITHUB_TOKEN": "ghp_x",
        "SSH_AUTH_SOCK": "/tmp/agent", "SLURM_JOB_ACCOUNT": "proj", "SLURMENV_PORT": "12345",
        "https_proxy": "http://alice:pa:ss@proxy.example:3128",
        "HTTP_PROXY": "bob:hunter2@proxy2:8080", "no_proxy": "r1n09,.cluster",
        "SLURM_JOB_NODELIST_PACK_GROUP_1": "r2n[09-10]",
    })  # fmt: skip
    kept = dump.select(env)
    text = json.dumps(kept)
    for secret in ("s3cr3t", "ghp_x", "/home/alice", "/tmp/agent", "pa:ss", "hunter2", "alice"):
        assert secret not in text
    assert "SLURM_JOB_ACCOUNT" not in kept  # not read by slurmenv
    assert kept["https_proxy"] == "http://REDACTED@proxy.example:3128"
    assert kept["HTTP_PROXY"] == "REDACTED@proxy2:8080"
    assert kept["no_proxy"] == "r1n09,.cluster"
    assert kept["SLURMENV_PORT"] == "12345"
    assert kept["SLURM_JOB_NODELIST_PACK_GROUP_1"] == "r2n[09-10]"
    assert kept["SLURM_PROCID"] == "1"


userinfo = st.text(alphabet=string.ascii_letters + string.digits + ":@%!/-._", min_size=1)


@settings(max_examples=200)
@given(user=userinfo, scheme=st.sampled_from(["", "http://", "https://", "socks5h://"]))
def test_redaction_keeps_the_host_and_drops_the_password(user: str, scheme: str) -> None:
    value = f"{scheme}{user}@proxy.invalid:3128"
    redacted = dump.redact_proxy(value)
    assert redacted == f"{scheme}REDACTED@proxy.invalid:3128"


def _env_names_in_source() -> set[str]:
    """Every Slurm variable name written as a string in the package's source."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            value = node.value if isinstance(node, ast.Constant) else None
            if (
                isinstance(value, str)
                and value.startswith(("SLURM_", "SLURMD_", "SLURMENV_"))
                and not value.endswith("_")  # a piece of an f-string
                and value.replace("_", "").isalnum()
                and value.isupper()
            ):
                names.add(value)
    return names


def test_every_variable_slurmenv_reads_is_dumped() -> None:
    """A new variable read anywhere in slurmenv must be added to dump.VARIABLES."""
    missing = sorted(name for name in _env_names_in_source() if not dump.is_read(name))
    assert missing == []
    launcher_names = set(slurmenv.OUTPUTS["all"])
    for module in launchers.modules():
        launcher_names |= set(module.VARIABLES)
        assert all(dump.is_read(prefix + "X") for prefix in module.PREFIXES), module.NAME
    assert sorted(n for n in launcher_names if not dump.is_read(n)) == []


@pytest.mark.parametrize(
    "name", ["OMPI_MCA_orte_precondition_transports", "TORCHELASTIC_TOKEN", "PMIX_SECRET",
             "SLURMENV_API_KEY", "MV2_PASSWORD", "SLURM_JWT", "PMI_CRED"],
)
def test_credential_like_names_are_redacted(name: str) -> None:
    assert base.redact(name, "s3cr3t-value") == "REDACTED"
    # kept only through the allow-list, and then redacted
    kept = dump.select({name: "s3cr3t-value", "TORCHELASTIC_RUN_ID": "r1"})
    assert "s3cr3t-value" not in json.dumps(kept)
    assert kept["TORCHELASTIC_RUN_ID"] == "r1"


def test_output_name_patterns() -> None:
    env = {"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "3", "SLURM_PROCID": "7", "SLURM_NODEID": "1",
           "SLURMD_NODENAME": "r1n10"}
    assert dump.expand_output("d-%j.%s-%t-%n-%N-100%%.json", env) == "d-12.3-7-1-r1n10-100%.json"
    assert dump.expand_output(dump.DEFAULT_OUTPUT, {"SLURMD_NODENAME": "x"}) == \
        "slurmenv-dump-nojob.nostep.0.json"


# -- replay ---------------------------------------------------------------------------------
def dump_and_load(env: Mapping[str, str], tmp: pathlib.Path, **options: Any) -> dump.Dump:
    return dump.load(write(dump.collect(env, options=options), tmp / "d.json"))


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(1, 3), min_size=1, max_size=5),
    distribution=st.sampled_from([None, "block", "cyclic", "plane"]),
    data=st.data(),
    extra=st.fixed_dictionaries({}, optional={
        "SLURMENV_TF_CHIEF": st.just("1"), "SLURM_CPUS_PER_TASK": st.sampled_from(["1", "4"]),
        "MASTER_PORT": st.just("23456"), "CUDA_VISIBLE_DEVICES": st.just("0,1,2,3"),
        "SLURMENV_BIND_GPUS": st.just("1"), "SLURMENV_PORT_RANGE": st.just("20000-29999"),
    }),
)
def test_replay_equals_the_original(
    tmp_path_factory: pytest.TempPathFactory,
    counts: list[int], distribution: str | None, data: st.DataObject, extra: dict[str, str],
) -> None:
    if extra.get("SLURMENV_BIND_GPUS") and max(counts) > 4:
        extra.pop("SLURMENV_BIND_GPUS")
    hosts = [f"c{i}" for i in range(len(counts))]
    rank = data.draw(st.integers(0, sum(counts) - 1))
    plane = 2 if distribution == "plane" else None
    env = synth.step_env(hosts, counts, rank, distribution, plane, **extra)
    tmp = tmp_path_factory.mktemp("replay")
    loaded = dump_and_load(env, tmp)
    res, replayed = loaded.replay()
    assert replayed == loaded.recorded
    try:
        original = slurmenv.resolve(env)
    except slurmenv.SlurmEnvError as exc:
        assert res is None and replayed["error"] == exc.message
        return
    assert res is not None
    assert res.env("all") == original.env("all")
    assert res.to_dict() == original.to_dict()
    assert (res.hosts, res.node_of, res.local_of) == (
        original.hosts, original.node_of, original.local_of
    )


def test_replay_uses_the_recorded_cpu_count(tmp_path: pathlib.Path) -> None:
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 0)
    data = dump.collect(env)
    data["cpu_affinity"] = 48  # a bigger node than this machine
    data["resolution"]["env"]["OMP_NUM_THREADS"] = "48"
    loaded = dump.load(write(data, tmp_path / "d.json"))
    before = os.sched_getaffinity(0)
    res = loaded.resolve()
    assert res.env("all")["OMP_NUM_THREADS"] == "48"
    assert "48 CPUs" in res.sources["OMP_NUM_THREADS"]
    assert os.sched_getaffinity(0) == before  # this process's own answer is back


def test_replay_of_an_arbitrary_layout_carries_the_host_file(tmp_path: pathlib.Path) -> None:
    hostfile_hosts = ["r2n10", "r1n09", "r2n10"]
    path = tmp_path / "hostfile"
    path.write_text("\n".join(hostfile_hosts) + "\n")
    env = synth.step_env(["r1n09", "r2n10"], [1, 2], 1, "arbitrary",
                         hostfile_hosts=hostfile_hosts, SLURM_HOSTFILE=str(path))
    loaded = dump_and_load(env, tmp_path)
    path.unlink()  # the laptop does not have the cluster's file
    res, replayed = loaded.replay()
    assert res is not None and replayed == loaded.recorded
    assert res.node_of == (1, 0, 1) and res.master_addr == "r2n10"


def test_an_error_is_recorded_and_replayed(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = synth.step_env(HOSTS, [5, 1, 1, 1], 0)
    batch = {k: v for k, v in env.items() if not k.startswith("SLURM_STEP")}
    use_env(monkeypatch, batch)
    out = tmp_path / "batch.json"
    assert main(["dump", "-o", str(out)]) == 0
    assert "error recorded" in capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["resolution"]["variable"] == "SLURM_STEP_ID"
    use_env(monkeypatch, {})
    assert main(["show", "--from", str(out)]) == 1
    err = capsys.readouterr().err
    assert "replay: identical to the resolution recorded" in err
    assert "outside any job step" in err


def test_show_from_file_reports_a_difference(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = dump.collect(synth.step_env(HOSTS, [2, 2, 2, 2], 3))
    data["resolution"]["summary"]["master_port"] = 1  # as if an older slurmenv had said so
    path = write(data, tmp_path / "d.json")
    use_env(monkeypatch, {})
    assert main(["show", "--from", path]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^RANK +3$", out, re.MULTILINE)
    assert "replay: DIFFERS" in out and "summary.master_port: 1 ->" in out
    assert main(["show", "--from", path, "--all-ranks", "--json"]) == 0
    replay = json.loads(capsys.readouterr().out)["replay"]
    assert replay["identical"] is False
    assert replay["differences"][0].startswith("summary.master_port: 1 ->")


def test_show_from_file_matches_show_in_the_task(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = synth.step_env(HOSTS, [3, 1, 1, 1], 2, CUDA_VISIBLE_DEVICES="0,1,2",
                         SLURM_GPUS_ON_NODE="3")
    use_env(monkeypatch, env)
    assert main(["show", "--all-ranks"]) == 0
    live = capsys.readouterr().out
    out = tmp_path / "d.json"
    assert main(["dump", "-o", str(out)]) == 0
    use_env(monkeypatch, {})
    capsys.readouterr()
    assert main(["show", "--all-ranks", "--from", str(out)]) == 0
    replayed = capsys.readouterr().out
    assert replayed.startswith(live)
    assert "replay: identical" in replayed[len(live):]


def test_options_given_to_dump_are_replayed(tmp_path: pathlib.Path) -> None:
    env = synth.step_env(HOSTS, [2, 2, 2, 2], 0)
    loaded = dump_and_load(env, tmp_path, port=23456, tf_chief=True)
    res = loaded.resolve()
    assert res.master_port == 23456 and "chief" in res.tf_config["cluster"]
    assert loaded.resolve(port=24000).master_port == 24000  # the command line wins


@pytest.mark.parametrize("argv", [["--for", "torch"], ["--for=tf"], ["--for"]])
def test_dump_refuses_for_and_never_reads_it_as_force(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    # a dump records every output; --for (argparse would take it for --force once it was no
    # option of dump's) is refused, the existing file kept, and the replay named
    use_env(monkeypatch, synth.step_env(HOSTS, [2, 2, 2, 2], 0))
    target = tmp_path / "kept.json"
    target.write_text("before")
    with pytest.raises(SystemExit) as exc:
        main(["dump", "-o", str(target), *argv])
    assert exc.value.code == 2 and target.read_text() == "before"
    err = capsys.readouterr().err
    assert ("--from FILE --for" in err) if argv != ["--for"] else ("expected one argument" in err)


@pytest.mark.parametrize("content, message", [
    ("not json", "not JSON"),
    ('{"environ": {}}', "not a slurmenv dump"),
    ('{"slurmenv_dump": 1, "environ": {"A": 1}}', "not a mapping of strings"),
])  # fmt: skip
def test_bad_dump_files(tmp_path: pathlib.Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(slurmenv.SlurmEnvError, match=message):
        dump.load(str(path))
    assert main(["doctor", "--from", str(path)]) == 2


def test_missing_dump_file(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--from", str(tmp_path / "nope.json")]) == 1
    assert "cannot read the dump" in capsys.readouterr().err


# -- dumps taken on the real cluster --------------------------------------------------------
REAL = sorted(DUMPS.glob("*.json"))


def test_real_dumps_are_present() -> None:
    names = {p.stem for p in REAL}
    assert {"healthy-rank0", "healthy-rank5", "batch-script", "proxy", "port-taken",
            "name-unresolved"} <= names


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_real_dump_replays_the_same_values(path: pathlib.Path) -> None:
    """The values, not the wording of the explanations (which may change between versions;
    tests/test_real_debugging.py compares everything for dumps of the same version)."""
    loaded = dump.load(str(path))
    assert loaded.probe is not None  # taken with --probe
    _, replayed = loaded.replay()
    assert dump.same_values(loaded.recorded, replayed), dump.differences(
        loaded.recorded, replayed
    )


def test_reworded_explanations_are_not_a_difference(tmp_path: pathlib.Path) -> None:
    data = dump.collect(synth.step_env(HOSTS, [2, 2, 2, 2], 3))
    data["resolution"]["summary"]["sources"]["RANK"] = "worded otherwise"
    del data["resolution"]["summary"]["gpus"]  # as if recorded before that field existed
    loaded = dump.load(write(data, tmp_path / "d.json"))
    report = dump.replay_report(loaded, loaded.replay()[1])
    assert report[0].startswith("replay: same values as recorded")
    assert "summary.sources.RANK" in report[0]
    data["resolution"]["summary"]["rank"] = 2  # but a value is
    loaded = dump.load(write(data, tmp_path / "d.json"))
    assert dump.replay_report(loaded, loaded.replay()[1])[0].startswith("replay: DIFFERS")


def verdicts(path: pathlib.Path) -> dict[str, str]:
    """The verdict of every check the dump can answer, as doctor --from gives it: not those
    needing a probe fact added after the dump was recorded (skipped, saying so)."""
    report = doctor.replay(dump.load(str(path)))
    return {c.name: c.verdict for c in report.checks if not c.message.startswith(NOT_RECORDED)}


def test_real_dump_verdicts() -> None:
    healthy = verdicts(DUMPS / "healthy-rank0.json")
    assert set(healthy.values()) == {"ok"}, healthy
    assert verdicts(DUMPS / "batch-script.json")["step"] == "error"
    assert verdicts(DUMPS / "proxy.json")["proxy"] == "error"
    assert verdicts(DUMPS / "port-taken.json")["ports"] == "error"
    assert verdicts(DUMPS / "name-unresolved.json")["master-name"] == "error"
    assert verdicts(DUMPS / "healthy-rank5.json")["interface"] == "ok"


def test_doctor_from_real_dump_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--from", str(DUMPS / "port-taken.json")]) == 1
    out = capsys.readouterr().out
    assert "[replayed from" in out
    assert re.search(r"error +ports +already listening on r1n09: \d+ \(MASTER_PORT, rank 0\)",
                     out)

