"""``slurmenv doctor``: verdicts from synthetic environments and node facts, and the probe of
this machine's real network (loopback, a real listening socket). Real Slurm:
tests/test_real_debugging.py."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import synth

from slurmenv import doctor
from slurmenv.commands.main import main
from slurmenv.doctor.context import NOT_RECORDED

HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
ADDR = {h: f"10.213.0.{i + 2}" for i, h in enumerate(HOSTS)}


def facts(
    node: str = "r1n10",
    master: str = "r1n09",
    addresses: list[str] | None = None,
    listening: list[dict[str, Any]] | None = None,
    interfaces: dict[str, list[str]] | None = None,
    affinity: int = 1,
) -> dict[str, Any]:
    """What probe() finds on ``node`` of the test cluster (overridable)."""
    addresses = [ADDR[master]] if addresses is None else addresses
    interfaces = interfaces or {"lo": ["127.0.0.1", "::1"], "eth0": [ADDR[node]]}
    route = None
    if addresses:
        source = ADDR[node] if not addresses[0].startswith("127.") else addresses[0]
        iface = next(n for n, a in interfaces.items() if source in a)
        route = {"address": addresses[0], "source": source, "interface": iface, "error": None}
    return {
        "hostname": node, "cpus": {"affinity": affinity, "count": 8}, "interfaces": interfaces,
        "master": {"name": master, "addresses": addresses,
                   "error": None if addresses else "[Errno -2] Name or service not known"},
        "route": route, "listening": listening or [],
    }  # fmt: skip


def step(rank: int = 3, counts: tuple[int, ...] = (2, 2, 2, 2), **extra: str) -> dict[str, str]:
    """Task ``rank`` of a healthy step: -c 1, OMP_NUM_THREADS=1, and (even counts)
    --ntasks-per-node, which sets SLURM_NTASKS_PER_NODE."""
    base = {"SLURM_CPUS_PER_TASK": "1", "SLURM_CPUS_ON_NODE": "2", "OMP_NUM_THREADS": "1"}
    if len(set(counts)) == 1:
        base["SLURM_NTASKS_PER_NODE"] = str(counts[0])
    base.update(extra)
    return synth.step_env(HOSTS[: len(counts)], list(counts), rank, **base)


def run(env: Mapping[str, str], found: Mapping[str, Any] | None = None, **kw: Any) -> dict[str, doctor.Check]:
    options = kw.pop("options", {})
    report = doctor.diagnose(env, options, ephemeral=(32768, 60999), facts=found, **kw)
    assert [c.name for c in report.checks] == list(doctor.CHECKS)
    return {c.name: c for c in report.checks}


def verdicts(checks: Mapping[str, doctor.Check]) -> dict[str, str]:
    return {name: c.verdict for name, c in checks.items()}


def test_healthy_step_is_all_ok() -> None:
    checks = run(step(), facts())
    assert set(verdicts(checks).values()) == {"ok"}, checks
    assert checks["master-name"].message == "r1n09 resolves here to 10.213.0.2"
    assert checks["interface"].message.startswith("eth0 (10.213.0.3) reaches the master")
    assert "NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0" in checks["interface"].message
    report = doctor.diagnose(step(), {}, ephemeral=(32768, 60999), facts=facts())
    assert report.errors == 0 and report.ifname == {
        "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"
    }


def test_batch_script_is_an_error_with_the_fix() -> None:
    env = {k: v for k, v in step(0).items() if not k.startswith("SLURM_STEP")}
    checks = run(env, facts(node="r1n09"))
    assert checks["step"].verdict == "error"
    assert "outside any job step" in checks["step"].message
    assert "srun" in (checks["step"].fix or "")
    assert checks["counts"].verdict == "skipped"
    assert checks["master-name"].verdict == "skipped"


def test_interactive_step_and_no_slurm_are_warnings() -> None:
    interactive = step(0, (1,), SLURM_STEP_ID=str(synth.INTERACTIVE_STEP_ID))
    assert run(interactive)["step"].verdict == "warning"
    none = run(synth.clean_env(base={}), facts())
    assert none["step"].verdict == "warning" and "not inside a Slurm job" in none["step"].message


def test_torchrun_values_are_reported() -> None:
    env = step(1, TORCHELASTIC_RUN_ID="x", RANK="1", WORLD_SIZE="8", MASTER_ADDR="r1n09",
               MASTER_PORT="29500", LOCAL_WORLD_SIZE="2", LOCAL_RANK="1", GROUP_RANK="0",
               GROUP_WORLD_SIZE="4")
    checks = run(env)
    assert checks["step"].verdict == "ok" and "torchrun" in checks["step"].message
    assert checks["tf-config"].verdict == "skipped"


def test_inconsistent_counts_are_an_error() -> None:
    checks = run(step(SLURM_STEP_NUM_TASKS="9"), facts())
    assert checks["counts"].verdict == "error"
    assert "SLURM_STEP_TASKS_PER_NODE adds up to 8 tasks but SLURM_STEP_NUM_TASKS=9" in \
        checks["counts"].message


def test_rank_left_over_from_the_batch_script() -> None:
    checks = run(step(RANK="0"), facts())
    assert checks["counts"].verdict == "error"
    assert "RANK=0 is already set" in checks["counts"].message


def test_master_name_that_does_not_resolve() -> None:
    env = step(SLURMENV_ADDR_TEMPLATE="{host}-nosuch")
    checks = run(env, facts(master="r1n09", addresses=[]) | {"master": {
        "name": "r1n09-nosuch", "addresses": [], "error": "[Errno -2] Name or service not known"
    }})
    assert checks["master-name"].verdict == "error"
    assert "r1n09-nosuch does not resolve on r1n10" in checks["master-name"].message
    assert "'{host}-nosuch'" in (checks["master-name"].fix or "")
    assert checks["interface"].verdict == "skipped"


def test_master_name_resolving_to_loopback() -> None:
    found = facts(node="r1n09", addresses=["127.0.1.1"],
                  interfaces={"lo": ["127.0.0.1", "127.0.1.1"], "eth0": [ADDR["r1n09"]]})
    checks = run(step(0), found)
    assert checks["master-name"].verdict == "error" and "loopback" in checks["master-name"].message
    assert checks["interface"].verdict == "error"
    report = doctor.diagnose(step(0), {}, facts=found)
    assert report.ifname is None  # nothing to export


def test_single_node_loopback_is_fine() -> None:
    found = facts(node="r1n09", addresses=["127.0.1.1"],
                  interfaces={"lo": ["127.0.0.1", "127.0.1.1"], "eth0": [ADDR["r1n09"]]})
    checks = run(step(0, (2,)), found)
    assert checks["master-name"].verdict == "ok"
    assert checks["interface"].verdict == "ok"


@pytest.mark.parametrize("value, allowed", [
    ("eth", True), ("eth0", True), ("=eth0", True), ("=eth", False), ("ib,eth", True),
    ("^eth", False), ("^lo,docker", True), ("^=eth", True), ("^=eth0", False), ("ib0", False),
])  # fmt: skip
def test_nccl_socket_ifname_rules(value: str, allowed: bool) -> None:
    assert doctor.nccl_allows(value, "eth0") is allowed


def test_ifname_set_to_the_wrong_interface() -> None:
    checks = run(step(NCCL_SOCKET_IFNAME="ib", GLOO_SOCKET_IFNAME="eth0,eth1"), facts())
    assert checks["interface"].verdict == "error"
    assert "NCCL_SOCKET_IFNAME=ib excludes eth0" in checks["interface"].message
    assert "GLOO" not in checks["interface"].message
    checks = run(step(GLOO_SOCKET_IFNAME="eth1"), facts())
    assert "GLOO_SOCKET_IFNAME=eth1 does not name eth0" in checks["interface"].message


def test_nccl_name_made_exact_when_another_interface_shares_the_prefix() -> None:
    found = facts(interfaces={"lo": ["127.0.0.1"], "eth0": [ADDR["r1n10"]], "eth0.5": ["10.9.0.1"]})
    report = doctor.diagnose(step(), {}, facts=found)
    assert report.ifname == {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}


def test_port_already_listening_on_the_master_node() -> None:
    env = step(0, SLURMENV_PORT="23456")
    taken = [{"port": 23456, "address": "0.0.0.0", "pid": 4321, "process": "python3",
              "same_step": False, "rank": None}]
    checks = run(env, facts(node="r1n09", listening=taken))
    assert checks["ports"].verdict == "error"
    assert "already listening on r1n09: 23456 (MASTER_PORT, rank 0) by pid 4321 python3" in \
        checks["ports"].message
    ours = [dict(taken[0], same_step=True, rank="0")]
    checks = run(env, facts(node="r1n09", listening=ours))
    assert checks["ports"].verdict == "ok" and "already opened by this step" in \
        checks["ports"].message


def test_master_port_is_only_checked_on_the_master_node() -> None:
    checks = run(step(3, SLURMENV_PORT="23456"), facts())
    assert "MASTER_PORT" not in checks["ports"].message
    assert "23457 (TensorFlow, rank 2), 23458 (TensorFlow, rank 3)" in checks["ports"].message


def test_inherited_master_port_in_a_job_is_a_warning() -> None:
    # export MASTER_PORT=29500 in the batch script: kept, but every step of the job takes it
    for rank, node, found in ((0, "r1n09", facts(node="r1n09")), (3, "r1n10", facts()),
                              (0, "r1n09", None)):
        checks = run(step(rank, MASTER_PORT="29500"), found)
        ports = checks["ports"]
        assert ports.verdict == "warning", ports
        assert ports.message.startswith(
            f"MASTER_PORT=29500 is inherited (exported before srun, e.g. in the batch script): "
            f"every step and launch of job {synth.DEFAULT_JOB_ID} takes it instead of a port "
            "derived per step, so concurrent ones collide; ports of step"
        ), ports
        assert f"opened on {node}" in ports.message
        assert ports.fix == "unset MASTER_PORT in the batch script and let slurmenv derive a " \
            "port per step (or reserve ports with srun --resv-ports=N)"
        others = {n: v for n, v in verdicts(checks).items() if n != "ports"}
        assert set(others.values()) <= {"ok", "skipped"}, checks  # only ports warns
    # the resolver still keeps it: the user's explicit choice
    report = doctor.diagnose(step(0, MASTER_PORT="29500"), {}, facts=facts(node="r1n09"))
    assert report.warnings == 1 and report.errors == 0
    assert "29500 (MASTER_PORT, rank 0)" in report.checks[
        list(doctor.CHECKS).index("ports")].message


def test_master_port_not_inherited_is_no_warning() -> None:
    given = [
        step(0, MASTER_PORT="29500", SLURMENV_PORT="23456"),  # SLURMENV_PORT wins, per job
        step(0, SLURMENV_PORT="23456"),
        step(0),  # derived per step
    ]
    for env in given:
        assert run(env, facts(node="r1n09"))["ports"].verdict == "ok", env
    # --port given: the user chose it for this launch
    checks = run(step(0, MASTER_PORT="29500"), facts(node="r1n09"), options={"port": 23456})
    assert checks["ports"].verdict == "ok" and "23456 (MASTER_PORT, rank 0)" in \
        checks["ports"].message
    # torchrun's workers: torchrun set MASTER_PORT for them (Resolution.fixed)
    torchrun = step(1, TORCHELASTIC_RUN_ID="x", RANK="1", WORLD_SIZE="8", MASTER_ADDR="r1n09",
                    MASTER_PORT="29500", LOCAL_WORLD_SIZE="2", LOCAL_RANK="1", GROUP_RANK="0",
                    GROUP_WORLD_SIZE="4")
    checks = run(torchrun, facts(node="r1n09"))
    assert "torchrun" in checks["step"].message
    assert checks["ports"].verdict == "ok", checks["ports"]
    # outside a Slurm job: one launch, nothing to collide with
    outside = run(synth.clean_env(base={}, MASTER_PORT="29500"), facts())
    assert outside["ports"].verdict == "ok", outside["ports"]
    assert "29500" in outside["ports"].message


def test_port_inside_the_ephemeral_range() -> None:
    checks = run(step(0, MASTER_PORT="40000"), facts(node="r1n09"))
    assert checks["ports"].verdict == "error"
    assert "40000 (MASTER_PORT, rank 0)" in checks["ports"].message
    assert "ephemeral port range 32768-60999" in checks["ports"].message


def test_proxy_without_no_proxy_is_the_jean_zay_pitfall() -> None:
    env = step(https_proxy="http://alice:secret@proxy.invalid:3128")
    checks = run(env, facts())
    proxy = checks["proxy"]
    assert proxy.verdict == "error"
    assert "https_proxy=http://REDACTED@proxy.invalid:3128" in proxy.message
    assert "secret" not in proxy.message + (proxy.fix or "")
    assert "r1n09, r1n10, r2n09, r2n10" in proxy.message
    assert proxy.fix is not None and proxy.fix.startswith("unset https_proxy")
    assert "no_grpc_proxy=r1n09,r1n10,r2n09,r2n10" in proxy.fix
    assert run(env, facts(), for_="torch")["proxy"].verdict == "warning"


@pytest.mark.parametrize("extra, verdict", [
    ({"https_proxy": "http://p:3128", "no_proxy": "r1n09,r1n10,r2n09,r2n10"}, "ok"),
    ({"https_proxy": "http://p:3128", "no_proxy": "n09, n10"}, "ok"),  # gRPC: suffix match
    ({"https_proxy": "http://p:3128", "no_proxy": "r1n09"}, "error"),
    ({"https_proxy": "http://p:3128", "no_proxy": "*"}, "error"),  # gRPC has no wildcard
    # no_grpc_proxy, when set, is the only list gRPC reads
    ({"https_proxy": "http://p:3128", "no_proxy": "n09,n10", "no_grpc_proxy": "x"}, "error"),
    ({"https_proxy": "", "http_proxy": "http://p:3128"}, "ok"),  # empty: no proxy, stop
    ({"grpc_proxy": "http://p:3128", "no_grpc_proxy": "n09,n10"}, "ok"),
    ({"HTTPS_PROXY": "http://p:3128", "HTTP_PROXY": "http://p:3128"}, "ok"),  # gRPC: lowercase
    ({"http_proxy": "socks5://p:1080"}, "ok"),  # gRPC ignores other schemes
])  # fmt: skip
def test_proxy_rules_are_grpc_rules(extra: dict[str, str], verdict: str) -> None:
    assert run(step(**extra), facts())["proxy"].verdict == verdict


def test_no_proxy_cidr_for_addresses() -> None:
    env = {"https_proxy": "http://p:3128", "no_proxy": "10.213.0.0/24"}
    assert doctor.grpc_exempt(env, "10.213.0.7")
    assert not doctor.grpc_exempt(env, "10.214.0.7")
    assert not doctor.grpc_exempt(env, "r1n09")


def test_proxy_in_the_batch_script_uses_the_job_nodes() -> None:
    env = {k: v for k, v in step(0).items() if not k.startswith("SLURM_STEP")}
    env["http_proxy"] = "http://p:3128"
    checks = run(env)
    assert checks["proxy"].verdict == "error" and "r2n10" in checks["proxy"].message


@pytest.mark.parametrize("extra, tasks, verdict, words", [
    ({}, 2, "ok", "no GPU given"),
    ({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_GPUS_ON_NODE": "2"}, 2, "ok", "LOCAL_RANK"),
    # --gpus-per-task=1 as observed: SLURM_STEP_GPUS narrowed too
    ({"CUDA_VISIBLE_DEVICES": "1", "SLURM_STEP_GPUS": "1", "SLURM_GPUS_ON_NODE": "2",
      "SLURMD_TRES_BIND": "gpu:per_task:1"}, 2, "ok", "cuda:0"),
    ({"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_GPUS_ON_NODE": "4",
      "SLURMD_TRES_BIND": "gpu:per_task:2"}, 2, "warning", "1 would sit idle"),
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_GPUS_ON_NODE": "4"}, 2, "warning", "2 would sit"),
    ({"CUDA_VISIBLE_DEVICES": "0", "SLURM_GPUS_ON_NODE": "1"}, 2, "warning", "share 1 GPU"),
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_GPUS_ON_NODE": "4",
      "SLURMENV_BIND_GPUS": "1"}, 4, "ok", "CUDA_VISIBLE_DEVICES=3: use device 0"),
    ({"SLURM_STEP_GPUS": "0,1", "SLURM_GPUS_ON_NODE": "2"}, 2, "warning", "unset"),
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, 2, "warning", "no GPU visible"),
])  # fmt: skip
def test_gpus(extra: dict[str, str], tasks: int, verdict: str, words: str) -> None:
    env = step(3 if tasks == 2 else 7, (tasks,) * 2, **extra)
    check = run(env, facts())["gpus"]
    assert (check.verdict, words in check.message) == (verdict, True), check


@pytest.mark.parametrize("extra, affinity, verdict, words", [
    ({}, 1, "ok", "fits"),
    ({"OMP_NUM_THREADS": "4"}, 1, "warning", "more than the CPUs per task"),
    ({"OMP_NUM_THREADS": "1", "SLURM_CPUS_PER_TASK": "4", "SLURM_CPUS_ON_NODE": "8"}, 4,
     "warning", "fewer CPUs"),
    ({"OMP_NUM_THREADS": "lots"}, 1, "warning", "not a number"),
    # unset: slurmenv sets it from -c, or from the affinity, and says so
    ({"OMP_NUM_THREADS": None, "SLURM_CPUS_PER_TASK": "1"}, 2, "ok", "sets it to 1"),
    ({"OMP_NUM_THREADS": None, "SLURM_CPUS_PER_TASK": None}, 2, "warning", "exceed the 2 CPUs"),
    # ... and with SLURMENV_THREADS=0 it is the user's job
    ({"OMP_NUM_THREADS": None, "SLURMENV_THREADS": "0"}, 2, "warning", "not 1"),
    ({"OMP_NUM_THREADS": None, "SLURMENV_THREADS": "0"}, 1, "ok", "bound to 1"),
])  # fmt: skip
def test_threads(
    extra: dict[str, str | None], affinity: int, verdict: str, words: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the resolution counts this process's CPUs when -c is not given
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    env = step(**{k: v for k, v in extra.items() if v is not None})
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
    check = run(env, facts(affinity=affinity))["threads"]
    assert (check.verdict, words in check.message) == (verdict, True), check


def test_tf_config_size() -> None:
    hosts = [f"a-very-long-node-name-for-this-test-{i:05d}" for i in range(2000)]
    env = synth.step_env(hosts, [2] * 2000, 0)
    report = doctor.diagnose(env, {}, facts=None)
    check = next(c for c in report.checks if c.name == "tf-config")
    assert check.verdict == "error" and "Argument list too long" in check.message
    assert report.errors == 1
    half = synth.step_env(hosts[:1600], [1] * 1600, 0)
    checks = run(half)
    assert checks["tf-config"].verdict == "warning"
    assert run(env, for_="torch")["tf-config"].verdict == "skipped"


def test_tf_config_left_over_in_the_environment() -> None:
    checks = run(step(TF_CONFIG='{"cluster": {"worker": ["x:1"]}, "task": {"index": 0}}'))
    assert checks["tf-config"].verdict == "warning"


def test_replay_without_probe_skips_node_checks() -> None:
    checks = run(step(), None)
    for name in ("master-name", "interface"):
        assert checks[name].verdict == "skipped" and "dump --probe" in checks[name].message
    assert checks["ports"].verdict == "ok" and "not probed" in checks["ports"].message


# -- output ---------------------------------------------------------------------------------
def test_text_report_layout() -> None:
    report = doctor.diagnose(step(https_proxy="http://p:3128"), {}, facts=facts())
    text = doctor.format_report(report)
    lines = text.splitlines()
    assert lines[0] == "slurmenv doctor: rank 3 of 8 on r1n10 (job 4242, step 0)"
    assert lines[-1] == "1 error, 0 warnings"
    proxy = next(i for i, line in enumerate(lines) if line.startswith("error    proxy"))
    assert lines[proxy + 1].strip().startswith("fix: unset https_proxy")
    assert "\033[" not in text
    quiet = doctor.format_report(report, quiet=True).splitlines()
    assert len(quiet) == 3 and quiet[-1].endswith(": 1 error, 0 warnings")
    assert "\033[31;1merror\033[0m" in doctor.format_report(report, colour=True)


def slurmenv_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "slurmenv", *args]


def test_colour_only_on_a_terminal(tmp_path: Any) -> None:
    env = synth.clean_env(https_proxy="http://p:3128")
    env.pop("NO_COLOR", None)
    piped = subprocess.run(
        slurmenv_cmd("doctor"), env=env, capture_output=True, text=True, check=False
    )
    assert "\033[" not in piped.stdout and "error    proxy" in piped.stdout
    assert piped.returncode == 1
    leader, follower = pty.openpty()
    proc = subprocess.run(
        slurmenv_cmd("doctor"), env=env, stdout=follower, stderr=follower, check=False
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.returncode == 1
    assert b"\033[31;1merror\033[0m" in out
    env["NO_COLOR"] = "1"
    leader, follower = pty.openpty()
    subprocess.run(
        slurmenv_cmd("doctor"), env=env, stdout=follower, stderr=follower, check=False
    )
    os.close(follower)
    out = os.read(leader, 65536)
    os.close(leader)
    assert b"\033[" not in out and b"error    proxy" in out


def test_json_output(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in list(os.environ):
        if name not in synth.clean_env():
            monkeypatch.delenv(name)
    assert main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in data["checks"]] == list(doctor.CHECKS)
    assert data["errors"] == 0 and data["checks"][0]["verdict"] == "warning"


# -- the probe, on this machine's real network -----------------------------------------------
def test_probe_outside_slurm_finds_loopback_and_exports_it() -> None:
    env = synth.clean_env()
    script = 'eval "$("$@" doctor --export-ifname)" && echo "$NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME"'
    proc = subprocess.run(
        ["sh", "-c", script, "sh", *slurmenv_cmd()], env=env, capture_output=True, text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["lo", "lo"]
    assert "warning  step" in proc.stderr  # problems go to stderr


#: docs/doctor.md's form: the interface lines taken first, then the program
IFNAME_FORM = ('ifname=$("$@" doctor --export-ifname) && eval "$ifname" && '
               'exec sh -c \'echo "PROGRAM-RAN $NCCL_SOCKET_IFNAME"\'')


def test_export_ifname_exits_1_on_an_error_and_the_form_starts_nothing() -> None:
    """A check's error (the master port already taken here): the lines are printed, the exit
    status is 1, and docs/doctor.md's form does not start the program."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        env = synth.clean_env(MASTER_PORT=str(listener.getsockname()[1]))
        alone = subprocess.run([*slurmenv_cmd(), "doctor", "--export-ifname"], env=env,
                               capture_output=True, text=True, check=False)
        assert alone.returncode == 1 and "export NCCL_SOCKET_IFNAME='lo';" in alone.stdout
        assert "error    ports" in alone.stderr
        form = subprocess.run(["sh", "-c", IFNAME_FORM, "sh", *slurmenv_cmd()], env=env,
                              capture_output=True, text=True, check=False)
    assert form.returncode == 1 and "PROGRAM-RAN" not in form.stdout
    ok = subprocess.run(["sh", "-c", IFNAME_FORM, "sh", *slurmenv_cmd()], env=synth.clean_env(),
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and ok.stdout.split() == ["PROGRAM-RAN", "lo"], ok.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare for a network namespace with no route")
def test_export_ifname_without_an_interface_prints_the_stop_line_and_exits_1() -> None:
    """No route to the master (a network namespace whose loopback is down): stdout is the line
    that stops eval, the exit status 1, and docs/doctor.md's form starts nothing."""
    env = synth.clean_env()
    alone = subprocess.run(["unshare", "--net", "--", *slurmenv_cmd(), "doctor",
                            "--export-ifname"], env=env, capture_output=True, text=True,
                           check=False)
    if "Operation not permitted" in alone.stderr:
        pytest.skip("no network namespace here")
    assert alone.returncode == 1
    assert alone.stdout == 'printf %s "$-" | grep -q i || exit 1\n'
    assert "no interface to export" in alone.stderr
    form = subprocess.run(["unshare", "--net", "--", "sh", "-c", IFNAME_FORM, "sh",
                           *slurmenv_cmd()], env=env, capture_output=True, text=True, check=False)
    assert form.returncode == 1 and "PROGRAM-RAN" not in form.stdout


def test_probe_sees_a_real_listener_on_the_master_port() -> None:
    with socket.socket() as listener:
        for port in range(20000 + os.getpid() % 5000, 32000):  # below the ephemeral range
            try:
                listener.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
        listener.listen()
        env = synth.clean_env(MASTER_PORT=str(port))
        found = doctor.probe(env)
        assert found["master"]["addresses"] == ["127.0.0.1"]
        assert found["route"]["interface"] == "lo"
        mine = [e for e in found["listening"] if e["port"] == port]
        assert mine and mine[0]["pid"] == os.getpid() and mine[0]["same_step"] is False
        report = doctor.diagnose(env, {}, facts=found)
        ports = next(c for c in report.checks if c.name == "ports")
        assert ports.verdict == "error" and f"pid {os.getpid()}" in ports.message


# -- Lightning: what its own SLURMEnvironment would make of the step -------------------------
def lightning_check(
    counts: list[int], rank: int = 1, distribution: str | None = None, **extra: str
) -> doctor.Check:
    env = synth.step_env(HOSTS[: len(counts)], counts, rank, distribution, **extra)
    return run(env)["lightning"]


def test_lightning_sub_step_of_a_larger_job_points_to_the_plugin() -> None:
    """The issue's case: job 2 nodes x --ntasks-per-node=2, step srun -N2 -n2."""
    check = lightning_check([1, 1], SLURM_NTASKS_PER_NODE="2", SLURM_JOB_NAME="train.sh")
    assert check.verdict == "warning"
    assert "SLURM_NTASKS_PER_NODE=2 (set for the job) but this step runs 1 task(s)" in check.message
    assert "plugins=[slurmenv.lightning.Environment()]" in (check.fix or "")


def test_lightning_srun_n_without_ntasks_per_node_is_refused_by_lightning() -> None:
    check = lightning_check([2, 2], SLURM_JOB_NAME="train.sh")
    assert check.verdict == "warning"
    assert "SLURM_NTASKS_PER_NODE is unset" in check.message


def test_lightning_uneven_step() -> None:
    check = lightning_check([2, 1], SLURM_JOB_NAME="train.sh", SLURM_NTASKS_PER_NODE="2")
    assert check.verdict == "warning"
    assert "spread unevenly over 2 nodes (2,1)" in check.message
    assert "--ntasks-per-node=K" in (check.fix or "")


@pytest.mark.parametrize(("distribution", "verdict"), [("block", "ok"), ("cyclic", "warning")])
def test_lightning_job_named_bash_numbers_ranks_itself(distribution: str, verdict: str) -> None:
    """srun bash -c '...' names the job 'bash': Lightning then ignores Slurm (observed)."""
    check = lightning_check([2, 2], 1, distribution, SLURM_JOB_NAME="bash")
    assert check.verdict == verdict
    assert "the job is named 'bash', so Lightning ignores Slurm" in check.message
    if verdict == "warning":
        assert "not Slurm's rank in this cyclic layout" in check.message


def test_lightning_even_step_with_its_ntasks_per_node_is_ok() -> None:
    """Lightning's own environment reads SLURM_PROCID: an even cyclic step is fine for it."""
    check = lightning_check([2, 2], 1, "cyclic", SLURM_JOB_NAME="t", SLURM_NTASKS_PER_NODE="2")
    assert check == doctor.Check(
        "lightning", "ok",
        "Lightning's own SLURMEnvironment reads this step right (devices=2, num_nodes=2)",
    )


def test_lightning_not_installed_on_the_probed_node() -> None:
    env = synth.step_env(HOSTS[:2], [1, 1], 1, SLURM_NTASKS_PER_NODE="2", SLURM_JOB_NAME="t.sh")
    check = run(env, {**facts(), "lightning": False})["lightning"]
    assert (check.verdict, check.message) == ("ok", "Lightning is not installed here: nothing to check")
    assert run(env, {**facts(), "lightning": True})["lightning"].verdict == "warning"


def without_lightning(monkeypatch: pytest.MonkeyPatch) -> None:
    """This Python as if Lightning were not installed (find_spec answers None)."""
    for name in ("lightning", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]


def test_the_probe_records_whether_lightning_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    installed = any(importlib.util.find_spec(p) for p in ("lightning", "pytorch_lightning"))
    assert doctor.probe(synth.clean_env())["lightning"] is installed
    without_lightning(monkeypatch)
    assert doctor.probe(synth.clean_env())["lightning"] is False


def test_replaying_a_dump_never_looks_at_lightning_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Lightning line of a replayed dump comes from the dump, whatever this machine has
    installed: docs/doctor.md shows it, regenerated on any machine."""
    from slurmenv import dump

    loaded = dump.load(os.path.join(os.path.dirname(__file__), "dumps", "healthy-rank0.json"))
    here = doctor.replay(loaded)
    without_lightning(monkeypatch)
    assert doctor.replay(loaded) == here
    lightning = next(c for c in here.checks if c.name == "lightning")
    assert lightning.message == "SLURM_JOB_NAME unset (a replayed dump?): not checked"


def test_mpi_rank_in_a_job_but_in_no_step() -> None:
    """mpirun in a batch script (recorded, tests/fixtures/mpi/): job 1, no step of the ranks.
    Before, the ports check said 'ports of step 1.None'."""
    path = os.path.join(os.path.dirname(__file__), "fixtures", "mpi", "openmpi_default.json")
    with open(path, encoding="utf-8") as handle:
        env = dict(json.load(handle)["ranks"][0]["env"])
    report = doctor.diagnose(env, {}, ephemeral=(32768, 60999),
                             facts=facts(node="r1n09", master="r1n09"))
    assert report.title == "rank 0 of 8 on r1n09 (Open MPI job 1)"
    ports = next(c for c in report.checks if c.name == "ports")
    assert ports.message.startswith("ports of job 1 opened on r1n09"), ports.message
    assert all("None" not in c.message for c in report.checks)


# -- a check added later, on a probe fact the recorded dumps lack ----------------------------
DUMP_DIR = Path(__file__).parent / "dumps"
DUMPS = sorted(DUMP_DIR.glob("*.json"))


@contextlib.contextmanager
def later_check(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """What a later version adds: a probe fact (only when the task resolves) and the check that
    needs it, as one function and one fact, nothing else."""
    from slurmenv.doctor import registry

    probe = sys.modules["slurmenv.dump.probe"]  # the module (doctor.probe is its function)
    monkeypatch.setattr(probe, "FACTS", (*probe.FACTS, "later_fact"))
    gather = probe._facts

    def with_later_fact(res: Any) -> dict[str, Any]:
        found: dict[str, Any] = gather(res)
        if res is not None:
            found["later_fact"] = 1500
        return found

    monkeypatch.setattr(probe, "_facts", with_later_fact)

    def check_later(ctx: Any) -> Any:
        # facts=("later_fact",): not called when the node was not probed (skipped_local)
        value = ctx.probed["later_fact"]  # never missing: a dump predating it does not get here
        if value is None:
            return doctor.Check("later", "skipped", "no resolution")
        return doctor.Check("later", "ok", f"later fact {value}")

    entries = list(registry.ENTRIES)
    registry.check("later", "later", "a later fact", facts=("later_fact",))(check_later)
    try:
        yield
    finally:  # the registry as it was, in place (the runner and report.py read that list)
        registry.ENTRIES[:] = entries


@pytest.mark.parametrize("path", DUMPS, ids=[p.stem for p in DUMPS])
def test_a_check_on_a_new_fact_is_skipped_in_dumps_that_predate_it(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurmenv import dump

    loaded = dump.load(str(path))
    before = doctor.replay(loaded)
    with later_check(monkeypatch):
        after = doctor.replay(loaded)
        text = doctor.format_report(after)
    *others, later = after.checks
    assert others == before.checks and after.title == before.title  # the others unchanged
    assert later == doctor.Check(
        "later", "skipped",
        "not recorded in this dump (recorded by slurmenv 0.1.0, before the probe fact "
        "later_fact): take a new one with slurmenv dump --probe",
    )
    assert "skipped  later " in text and "Traceback" not in text
    if path.stem.startswith("healthy"):  # all ok that it can answer
        assert {c.verdict for c in others if not c.message.startswith(NOT_RECORDED)} == {"ok"}
    assert doctor.CHECKS == {c.name: doctor.CHECKS[c.name] for c in before.checks}  # restored


def test_a_check_on_a_new_fact_runs_on_dumps_that_have_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurmenv import dump

    data = json.loads((DUMP_DIR / "healthy-rank0.json").read_text(encoding="utf-8"))
    path = tmp_path / "later.json"
    with later_check(monkeypatch):
        for value, verdict in ((9000, ("ok", "later fact 9000")),
                               (None, ("skipped", "no resolution"))):
            path.write_text(json.dumps({**data, "probe": {**data["probe"], "later_fact": value}}))
            checks = {c.name: c for c in doctor.replay(dump.load(str(path))).checks}
            assert (checks["later"].verdict, checks["later"].message) == verdict
        # live, the probe writes the new fact always: None where it does not apply
        assert doctor.probe(synth.clean_env())["later_fact"] == 1500
        batch = dump.load(str(DUMP_DIR / "batch-script.json"))
        with batch.environment() as env:
            assert doctor.probe(env)["later_fact"] is None
        # facts given to diagnose() (not a replayed dump) are taken as complete: a check
        # failing on a fact left out is reported skipped, with the error
        report = doctor.diagnose(step(0), {}, facts=facts(node="r1n09"))
        later = next(c for c in report.checks if c.name == "later")
        assert later.verdict == "skipped"
        assert later.message.startswith("not checked: it failed on its input (KeyError")


def test_every_fact_a_check_needs_is_one_the_probe_records() -> None:
    from slurmenv import dump
    from slurmenv.doctor import context, registry

    facts_ = sys.modules["slurmenv.dump.probe"].FACTS
    assert set(context.FIRST_FACTS) <= set(facts_)
    assert any(entry.facts for entry in registry.ENTRIES)
    for entry in registry.ENTRIES:
        assert set(entry.facts) <= set(facts_), entry.name
    assert set(doctor.probe(synth.clean_env())) == set(facts_)
    with dump.load(str(DUMP_DIR / "batch-script.json")).environment() as env:
        found = doctor.probe(env)  # no resolution: the first facts leave some out, no later one
    assert set(found) < set(facts_)
    assert set(facts_) - set(context.FIRST_FACTS) <= set(found)


@pytest.mark.parametrize("fixture", ["openmpi_default", "openmpi5_default", "hydra_default"])
def test_doctor_speaks_of_the_ranks_launcher_not_srun(fixture: str) -> None:
    """An MPI rank's TF_CONFIG check is skipped in its launcher's own words (the label its
    module gives), never with srun's ("under srun") whatever the launcher."""
    path = Path(__file__).resolve().parent / "fixtures" / "mpi" / f"{fixture}.json"
    env = dict(json.loads(path.read_text())["ranks"][1]["env"])
    checks = run(env, None)
    tf = checks["tf-config"]
    assert tf.verdict == doctor.SKIPPED, tf
    label = ("Open MPI job" if fixture.startswith("openmpi") else "Hydra job")
    assert f"no TF_CONFIG for a task of {label}" in tf.message, tf.message
    assert "srun" not in tf.message


def _hook_env(rank: int, formula: tuple[int, int], **extra: str) -> dict[str, str]:
    """A task's environment in a pyxis container whose image sets PYTORCH_VERSION: the values
    enroot's PyTorch hook adds (conf/hooks/extra/50-slurm-pytorch.sh), and pyxis's RANK."""
    env = step(rank)
    modulus, lowest = formula
    env.update(PYTORCH_VERSION="2.5.0", MASTER_ADDR=HOSTS[0], RANK=str(rank),
               MASTER_PORT=str(int(env["SLURM_JOB_ID"]) % modulus + lowest))
    env.update(extra)
    return env


def test_enroot_hooks_port_is_named() -> None:
    env = _hook_env(0, (4536, 61000))
    checks = run(env, facts(node="r1n09"))
    hook = checks["enroot"]
    assert hook.verdict == "warning", hook
    port = env["MASTER_PORT"]
    assert hook.message.startswith(
        f"MASTER_PORT={port} is what enroot's PyTorch hook sets in pyxis containers "
        "(SLURM_JOB_ID % 4536 + 61000, enroot 4) (PYTORCH_VERSION is set: the image is one "
        f"the hook acts on); slurmenv keeps an inherited MASTER_PORT, so every step of job "
        f"{synth.DEFAULT_JOB_ID} gets this one port"), hook
    assert "MASTER_ADDR" not in hook.message  # the hook's address is rank 0's here
    assert hook.fix is not None and "env -u MASTER_PORT slurmenv exec" in hook.fix
    # enroot 3's formula: the same, and said to lie in the ephemeral range
    old = run(_hook_env(3, (16384, 49152)), facts())["enroot"]
    assert old.verdict == "warning" and "enroot 3, in the ephemeral range" in old.message


def test_enroot_hooks_address_when_rank_0_is_elsewhere() -> None:
    env = _hook_env(1, (4536, 61000), MASTER_ADDR="r2n10")  # e.g. the first of another order
    hook = run(env, facts())["enroot"]
    assert hook.verdict == "warning"
    assert hook.message.endswith("; the hook's MASTER_ADDR=r2n10 is replaced by rank 0's r1n09")


@pytest.mark.parametrize("extra", [{"SLURMENV_PORT": "23456"}, {}])
def test_enroot_check_is_quiet_without_the_hooks_port(extra: dict[str, str]) -> None:
    env = _hook_env(0, (4536, 61000), **extra)
    if not extra:  # a port of the user's, not the hook's formula
        env["MASTER_PORT"] = str(int(env["MASTER_PORT"]) - 1)
    hook = run(env, facts(node="r1n09"))["enroot"]
    assert hook.verdict == "ok", hook
    assert ("not used: MASTER_PORT is 23456" in hook.message) == bool(extra), hook


@pytest.mark.parametrize("job", ["9" * 5000, "", "-3", "٤"])
def test_enroot_check_reads_any_job_id(job: str) -> None:
    env = _hook_env(0, (4536, 61000))
    env["SLURM_JOB_ID"] = job
    assert doctor.checks_ports.enroot_hook_port(env) is None


# -- the registry: one record per check, the guard declared once -----------------------------


@contextlib.contextmanager
def extra_check(monkeypatch: pytest.MonkeyPatch, **guard: Any) -> Iterator[list[Any]]:
    """A check ``extra`` registered with ``guard`` for the block; yields the contexts it was
    called with."""
    from slurmenv.doctor import registry

    monkeypatch.setattr(registry, "ENTRIES", list(registry.ENTRIES))
    calls: list[Any] = []

    def check_extra(ctx: Any) -> Any:
        calls.append(ctx)
        return doctor.Check("extra", "ok", "called")

    registry.check("extra", "extra", "a test check", **guard)(check_extra)
    yield calls


def test_a_check_needing_a_resolution_is_not_called_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with extra_check(monkeypatch, resolution=True) as calls:
        broken = doctor.diagnose(step(SLURM_PROCID="x"), {}, facts=facts()).checks[-1]
        healthy = doctor.diagnose(step(), {}, facts=facts()).checks[-1]
    assert broken == doctor.Check("extra", "skipped", "needs a resolution (see above)")
    assert healthy == doctor.Check("extra", "ok", "called") and len(calls) == 1


def test_a_check_needing_facts_is_skipped_when_the_node_was_not_probed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with extra_check(monkeypatch, facts=("cpus",)) as calls:
        unprobed = doctor.diagnose(step(), {}, facts=None).checks[-1]
        probed = doctor.diagnose(step(), {}, facts=facts()).checks[-1]
    assert unprobed.verdict == "skipped" and "not probed" in unprobed.message
    assert probed.message == "called" and len(calls) == 1


def test_a_check_reporting_resolver_errors_gets_the_resolvers_message_and_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with extra_check(monkeypatch, errors=("counts",), resolution=True) as calls:
        report = doctor.diagnose(step(SLURM_PROCID="x"), {}, facts=facts())
    counts, extra = report.checks[1], report.checks[-1]
    assert counts.verdict == "error" and not calls
    assert (extra.verdict, extra.message, extra.fix) == ("error", counts.message, counts.fix)


def test_the_check_order_names_every_registered_check_once() -> None:
    from slurmenv.doctor import checks, registry

    assert [entry.name for entry in registry.ENTRIES] == list(checks.ORDER)
    for wrong in (checks.ORDER[:-1], (*checks.ORDER, "step"), (*checks.ORDER[:-1], "nope")):
        with pytest.raises(ValueError, match="does not name each registered check"):
            registry.order(wrong)
    assert [entry.name for entry in registry.ENTRIES] == list(checks.ORDER)  # unchanged


def test_no_module_of_the_doctor_passes_500_lines() -> None:
    """The checks are split by topic (issue 27): a module that grows past 500 lines is split."""
    package = Path(doctor.__file__).parent
    modules = sorted(package.rglob("*.py"))
    assert len(modules) >= 12
    long = {str(p.relative_to(package)): n for p in modules
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert not long, f"doctor modules over 500 lines, split them by topic: {long}"
