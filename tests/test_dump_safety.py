"""Dump and replay safety (issue 19): a dump never overwrites through a link or escapes its
directory, records only what slurmenv reads, and a replay never reads the replaying machine's
files and never shows a traceback, whatever the file holds."""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import pytest
import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmenv import SlurmEnvError, dump
from slurmenv.commands.main import main
from slurmenv.doctor import diagnose

HOSTS = ["r1n09", "r1n10", "r2n09", "r2n10"]
DUMPS = pathlib.Path(__file__).parent / "dumps"
HEALTHY = json.loads((DUMPS / "healthy-rank5.json").read_text())


def use_env(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    keep = synth.clean_env()
    for name in list(os.environ):
        if name not in keep:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


# -- writing ---------------------------------------------------------------------------------
def test_dump_refuses_an_existing_file_and_never_follows_a_link(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_env(monkeypatch, synth.step_env(HOSTS, [2, 2, 2, 2], 1))
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    assert main(["dump", "-o", str(link)]) == 1
    assert "exists" in capsys.readouterr().err
    assert main(["dump", "-o", str(link), "--force"]) == 1
    assert "symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "precious"
    plain = tmp_path / "plain.json"
    plain.write_text("old")
    assert main(["dump", "-o", str(plain)]) == 1
    assert "--force" in capsys.readouterr().err and plain.read_text() == "old"
    assert main(["dump", "-o", str(plain), "--force"]) == 0
    assert json.loads(plain.read_text())["environ"]["SLURM_PROCID"] == "1"


@pytest.mark.parametrize("name", ["SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_STEP_ID"])
def test_a_name_pattern_stays_in_its_directory(name: str) -> None:
    env = {"SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0",
           "SLURM_PROCID": "0", name: "../../etc/x"}
    path = dump.expand_output("out/%N-%j.%s.%t.json", env)
    parts = pathlib.PurePath(path).parts
    assert parts[0] == "out" and len(parts) == 2 and parts[1] not in (".", "..")
    assert dump.expand_output("%N", {"SLURMD_NODENAME": ".."}) == "_"


def test_a_dump_records_no_whole_families(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**synth.step_env(HOSTS, [2, 2, 2, 2], 1), "OMPI_MCA_btl": "tcp",
           "PMIX_SERVER_URI5": "x", "I_MPI_PIN": "1", "HYDRA_HOST_FILE": "/h", "LSB_MCPU": "a",
           "PALS_SPOOL_DIR": "/s", "PET_EXTRA": "1", "FLUX_URI": "local://x",
           "TORCHELASTIC_ERROR_FILE": "/e", "MY_API_TOKEN": "secret"}
    kept = dump.select(env)
    assert not {"OMPI_MCA_btl", "PMIX_SERVER_URI5", "I_MPI_PIN", "HYDRA_HOST_FILE", "LSB_MCPU",
                "PALS_SPOOL_DIR", "PET_EXTRA", "FLUX_URI", "TORCHELASTIC_ERROR_FILE",
                "MY_API_TOKEN"} & set(kept)
    assert kept["SLURM_PROCID"] == "1"


# -- replaying -------------------------------------------------------------------------------
def crafted(tmp_path: pathlib.Path, **changes: Any) -> str:
    data = {**HEALTHY, **changes}
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_replay_never_reads_a_local_file_the_dump_names(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPLAY_SECRET_TOKEN", "hunter2")
    environ = {**HEALTHY["environ"], "SLURM_DISTRIBUTION": "arbitrary",
               "SLURM_HOSTFILE": "/proc/self/environ"}
    path = crafted(tmp_path, environ=environ, files={}, binary_files={})
    for command in (["show", "--from", path], ["show", "--from", path, "--json"],
                    ["doctor", "--from", path]):
        main(command)
        out, err = capsys.readouterr()
        assert "hunter2" not in out + err and "REPLAY_SECRET_TOKEN" not in out + err
        assert "cannot be read here" in out + err or dump.NOT_RECORDED in out + err


def test_a_recorded_host_file_is_still_replayed(tmp_path: pathlib.Path) -> None:
    hosts = ["r1n10", "r1n10", "r1n09", "r1n09", "r2n09", "r2n09", "r2n10", "r2n10"]
    environ = {**HEALTHY["environ"], "SLURM_DISTRIBUTION": "arbitrary",
               "SLURM_HOSTFILE": "/gone/hosts"}
    path = crafted(tmp_path, environ=environ, files={"SLURM_HOSTFILE": "\n".join(hosts)})
    assert dump.load(path).resolve().master_addr == "r1n10"


BAD_SHAPES: list[tuple[str, Any]] = [
    ("cpu_affinity", "x"), ("cpu_affinity", -1), ("cpu_affinity", 1.5), ("cpu_affinity", True),
    ("ephemeral_range", "x"), ("ephemeral_range", [1]), ("ephemeral_range", [5, 1]),
    ("ephemeral_range", ["a", "b"]), ("ephemeral_range", [1, 99999]),
    ("options", "x"), ("options", ["port"]), ("options", {"nope": 1}),
    ("options", {"port": "x"}), ("options", {"port": [1]}), ("options", {"port_range": "9-1"}),
    ("options", {"tf_chief": "yes"}), ("options", {"addr_template": "{host:>9}"}),
    ("environ", []), ("environ", {"A": 1}), ("files", {"SLURM_HOSTFILE": 3}),
    ("binary_files", {"PALS_APINFO": "%%%"}), ("resolution", [1]), ("probe", "x"),
    ("step_evidence", 3), ("slurmenv_dump", 2),
]


@pytest.mark.parametrize(("field", "value"), BAD_SHAPES)
def test_a_malformed_dump_is_refused_naming_the_field(
    tmp_path: pathlib.Path, field: str, value: Any
) -> None:
    with pytest.raises(SlurmEnvError) as info:
        dump.load(crafted(tmp_path, **{field: value}))
    assert info.value.variable == "--from" or str(info.value.variable).startswith("options.")


@pytest.mark.parametrize(
    "text", ['{"slurmenv_dump": NaN}', "[" * 100_000 + "]" * 100_000, "\xff\xfe", "",
             '{"slurmenv_dump": 1, "environ": {"A": "1"}, "cpu_affinity": Infinity}'],
)
def test_text_that_is_no_dump_is_refused(tmp_path: pathlib.Path, text: str) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape") if text != "\xff\xfe" else b"\xff\xfe")
    with pytest.raises(SlurmEnvError):
        dump.load(str(path))


def test_a_dump_path_that_is_not_a_regular_file_is_refused() -> None:
    with pytest.raises(SlurmEnvError, match="not a regular file"):
        dump.load("/dev/zero")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=3),
    max_leaves=8,
)
FIELDS = ["environ", "ephemeral_range", "cpu_affinity", "options", "files", "binary_files",
          "resolution", "probe", "step_evidence", "hostname", "created", "slurmenv_version"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(FIELDS), JSON, min_size=1, max_size=3))
def test_any_value_in_any_dump_field_replays_or_is_refused(
    tmp_path: pathlib.Path, changes: dict[str, Any]
) -> None:
    path = crafted(tmp_path, **changes)
    try:
        loaded = dump.load(path)
        loaded.replay()
        with loaded.environment() as env:
            report = diagnose(env, loaded.replay_options, ephemeral=loaded.ephemeral_range,
                              facts=loaded.probe)
        assert report.checks
    except SlurmEnvError as exc:
        assert exc.message


def test_doctor_of_malformed_probe_facts_reports_the_check_skipped(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    probe = {key: "garbage" for key in (HEALTHY.get("probe") or {"cpus": 1})}
    path = crafted(tmp_path, probe=probe)
    main(["doctor", "--from", path])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "slurmenv doctor" in out


# -- what a dump copies (issue 26) -----------------------------------------------------------
def test_the_issue_command_stores_no_environment_and_a_private_file(
    tmp_path: pathlib.Path,
) -> None:
    """The issue's own command, as a real process: SLURM_HOSTFILE=/proc/self/environ copied
    the whole environment, token included, into a file every user could read."""
    import subprocess

    done = subprocess.run(
        ["env", "-i", f"PATH={os.environ['PATH']}", "GITHUB_TOKEN=ghp_x",
         "SLURM_DISTRIBUTION=arbitrary", "SLURM_HOSTFILE=/proc/self/environ",
         "slurmenv", "dump", "-o", "d.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    written = tmp_path / "d.json"
    assert written.stat().st_mode & 0o777 == 0o600
    text = written.read_text()
    assert "ghp_x" not in text and "GITHUB_TOKEN" not in text
    data = json.loads(text)
    assert data["files"] == {} and data["binary_files"] == {}
    assert "/proc" in data["files_not_recorded"]["SLURM_HOSTFILE"]


def hostfile_env(path: pathlib.Path) -> dict[str, str]:
    return synth.step_env(["r1n09", "r2n10"], [1, 2], 1, "arbitrary",
                          hostfile_hosts=["r2n10", "r1n09", "r2n10"], SLURM_HOSTFILE=str(path))


def test_a_link_to_a_pseudo_file_is_not_followed_into_the_dump(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nor into the recorded resolution: the layout's refusal would quote the file's text."""
    monkeypatch.setenv("LEAK_CHECK_TOKEN", "zz-secret-zz")
    for target in ("/proc/self/environ", "/proc/self/cmdline", "/sys/kernel/notes",
                   "/dev/null"):
        link = tmp_path / "hosts"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        data = dump.collect(hostfile_env(link))
        assert "SLURM_HOSTFILE" not in data["files"] | data["binary_files"], target
        assert "SLURM_HOSTFILE" in data["files_not_recorded"], target
        assert "zz-secret-zz" not in json.dumps(data)
        assert "cannot be read here" in json.dumps(data["resolution"])


def test_a_bind_mounted_proc_is_still_a_pseudo_file() -> None:
    from slurmenv.dump import capture

    assert capture._on_pseudo_filesystem("/proc/self/environ")
    assert capture._on_pseudo_filesystem("/proc/self/root/proc/self/environ")
    assert not capture._on_pseudo_filesystem(__file__)


@pytest.mark.parametrize("content", [
    "GITHUB_TOKEN=ghp_x\n", "r2n10\nr1n09\nghp_0123456789abcdef\n",
    "r2n10\nr1n09\nAKIAABCDEFGHIJKLMNOP\n", "PATH=/usr/bin\0HOME=/root\0",
    "x = 3\n", "r1n09 'quoted'\n", "r2n10\nr1n09\nr[2-\n", "\xff\xfe",
])
def test_only_a_host_file_that_parses_and_holds_no_token_is_recorded(
    tmp_path: pathlib.Path, content: str
) -> None:
    path = tmp_path / "hosts"
    path.write_bytes(content.encode("utf-8", "surrogateescape") if content != "\xff\xfe"
                     else b"\xff\xfe")
    for name in ("SLURM_HOSTFILE", "PBS_NODEFILE", "LSB_DJOB_RANKFILE", "PALS_APINFO"):
        env = {**hostfile_env(path), name: str(path)}
        data = dump.collect(env)
        assert name not in data["files"] | data["binary_files"], name
        assert name in data["files_not_recorded"], name
        text = json.dumps(data)
        assert "ghp_" not in text and "AKIA" not in text and "HOME=" not in text


def test_a_real_host_file_and_a_real_apinfo_file_are_recorded(tmp_path: pathlib.Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("r2n10\nr1n09\nr2n10\n")
    apinfo = next((pathlib.Path(__file__).parent / "fixtures" / "pals").glob("*.apinfo"))
    env = {**hostfile_env(hosts), "PBS_NODEFILE": str(hosts), "PALS_APINFO": str(apinfo)}
    data = dump.collect(env)
    assert data["files"]["SLURM_HOSTFILE"] == data["files"]["PBS_NODEFILE"] == hosts.read_text()
    assert "PALS_APINFO" in data["binary_files"] and "files_not_recorded" not in data


@pytest.mark.parametrize(("line", "secret"), [
    ("GITHUB_TOKEN=ghp_x", True), ("export AWS_SECRET_ACCESS_KEY=abc", True),
    ("password: hunter2", True), ("OMPI_MCA_orte_precondition_transports=1-2", True),
    ("glpat-abcdef", True), ("eyJhbGciOiJIUzI1NiJ9.e30.x", True), ("-----BEGIN OPENSSH", True),
    ("r1n09", False), ("c[1-4]", False), ("node7:8", False), ("SLURM_PROCID=3", False),
])
def test_a_token_looking_line_is_the_variables_rule(line: str, secret: bool) -> None:
    from slurmenv.launchers import base

    assert base.looks_like_credential(line) is secret
    # one rule: every word that makes a variable a credential makes a NAME=value line one
    for word in base.CREDENTIAL_WORDS:
        assert base.looks_like_credential(f"MY_{word}=v") and base.is_credential(f"MY_{word}")


def test_every_dump_file_is_private(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_env(monkeypatch, {**synth.step_env(HOSTS, [2, 2, 2, 2], 1), "SLURMD_NODENAME": "r1n09",
                          "SLURM_JOB_ID": "77"})
    monkeypatch.chdir(tmp_path)
    old = os.umask(0o000)
    try:
        assert main(["dump"]) == 0
        assert main(["dump", "-o", "%N-%j.json"]) == 0
        replaced = tmp_path / "replaced.json"
        replaced.write_text("{}")
        replaced.chmod(0o666)
        assert main(["dump", "-o", str(replaced), "--force"]) == 0
    finally:
        os.umask(old)
    written = sorted(tmp_path.glob("*.json"))
    assert {p.name for p in written} >= {"r1n09-77.json", "replaced.json"} and len(written) == 3
    for path in written:
        assert path.stat().st_mode & 0o777 == 0o600, path


# -- replaying is bounded (issue 26) ---------------------------------------------------------
def largest_step_dump_text() -> str:
    """The text of a dump of the largest step slurmenv resolves: 100,000 nodes whose names do
    not compress, 8 tasks each, -m arbitrary with the largest host file a dump records,
    written as ``slurmenv dump`` writes (indent=1)."""
    nodes, per = 100_000, 8
    hosts = [f"rack{(i * 7919) % 1_000_000:06d}x{i}" for i in range(nodes)]
    data = dict(HEALTHY)
    data["environ"] = {**HEALTHY["environ"], "SLURM_STEP_NODELIST": ",".join(hosts),
                       "SLURM_JOB_NODELIST": ",".join(hosts), "SLURM_NODELIST": ",".join(hosts),
                       "SLURM_DISTRIBUTION": "arbitrary", "SLURM_HOSTFILE": "/spool/hosts"}
    line = "\n".join(hosts)
    data["files"] = {"SLURM_HOSTFILE": (line * (dump.FILE_LIMIT // len(line) + 1))[
        : dump.FILE_LIMIT]}
    data["resolution"] = {**HEALTHY["resolution"], "layout": {
        "hosts": hosts, "node_of": [r // per for r in range(nodes * per)],
        "local_of": [r % per for r in range(nodes * per)]}}
    return json.dumps(data, indent=1) + "\n"


def test_the_largest_step_s_dump_is_within_every_bound() -> None:
    """The limits are set from this dump (measured: 49 MB without the host file, 288 MB
    peak to replay), with margin: a limit lowered below a real dump fails here."""
    from slurmenv.dump import replay

    text = largest_step_dump_text()
    assert len(text.encode()) * 1.3 < dump.LOAD_LIMIT
    assert replay._parse_cost(text) * 1.3 < dump.LOAD_COST_LIMIT
    assert not replay._too_deep(json.loads(text), dump.LOAD_DEPTH_LIMIT - 20)


def test_the_cost_estimate_is_an_upper_bound_of_the_parsed_size() -> None:
    """_parse_cost counts characters; what json.loads builds is measured here, for every kind
    of value, so the bound holds for what the estimate lets through."""
    import sys

    def size(value: Any) -> int:
        seen = 0
        counted: set[int] = set()
        stack = [value]
        while stack:
            item = stack.pop()
            if id(item) in counted:  # shared: json's memoized keys, small ints, True
                continue
            counted.add(id(item))
            seen += sys.getsizeof(item)
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
        return seen

    from slurmenv.dump import replay

    n = 20_000
    for text in (
        "[" + ",".join(["[]"] * n) + "]", "[" + ",".join(["{}"] * n) + "]",
        "[" + ",".join(['"ab"'] * n) + "]", "[" + ",".join(['"abcdefgh"'] * n) + "]",
        "[" + ",".join(["123456789"] * n) + "]", "[" + ",".join(["true"] * n) + "]",
        "{" + ",".join(f'"{i:x}":"v{i}"' for i in range(n)) + "}",
        "[" + ",".join(['{"a":[1]}'] * n) + "]", "[" + ",".join(['{"a":1,"b":2}'] * n) + "]",
        "[" + ",".join(["[1,2,3,4,5]"] * n) + "]", json.dumps(HEALTHY),
    ):
        assert size(json.loads(text)) + 2 * len(text) <= replay._parse_cost(text), text[:20]


CRAFTED = {  # 40 MB each: the issue's crafted dump took 1 GB and 5 s
    "lists": "[]", "dicts": "{}", "short strings": '"ab"', "numbers": "1.5", "keys": None,
}


@pytest.mark.parametrize("kind", sorted(CRAFTED))
def test_a_crafted_40_mb_dump_is_refused_before_it_is_parsed(
    tmp_path: pathlib.Path, kind: str
) -> None:
    """Refused under a 700 MB address-space limit, as a real process: the refusal names the
    dump, never 'out of memory'."""
    import resource
    import subprocess

    item = CRAFTED[kind]
    count = 40_000_000 // (len(item) + 1) if item else 40_000_000 // 12
    body = ",".join([item] * count) if item else ",".join(
        f'"{i:x}":""' for i in range(count))
    text = ('{"slurmenv_dump": 1, "environ": {}, "probe": {"x": ' +
            (f"[{body}]" if item else f"{{{body}}}") + "}}")
    path = tmp_path / "crafted.json"
    path.write_text(text)
    with pytest.raises(SlurmEnvError) as info:
        dump.load(str(path))
    assert info.value.variable == "--from"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (700 << 20, 700 << 20))

    commands = [["show", "--from", str(path)]]
    if kind == "lists":  # the same load(): once is enough for doctor
        commands.append(["doctor", "--from", str(path)])
    for command in commands:
        done = subprocess.run(["slurmenv", *command], capture_output=True, text=True,
                              preexec_fn=limit, timeout=300, check=False)
        assert done.returncode in (1, 2), done.stderr
        assert "variable: --from=" in done.stderr and "out of memory" not in done.stderr
        assert "LOAD_COST_LIMIT" in done.stderr or "fractional number" in done.stderr


def nested(depth: int) -> Any:
    value: Any = {"error": "x"}
    for _ in range(depth):
        value = {"summary": value}
    return value


@pytest.mark.parametrize(("field", "value"), [
    ("resolution", {"summary": []}), ("resolution", {"summary": "x"}),
    ("resolution", {"summary": {"sources": []}}), ("resolution", {"summary": {"sources": {"A": 1}}}),
    ("resolution", {"summary": {}, "env": [1]}), ("resolution", {"summary": {}, "env": {"A": 1}}),
    ("resolution", {"summary": {}, "layout": {"hosts": "a"}}),
    ("resolution", {"summary": {}, "layout": {"hosts": [], "node_of": ["0"], "local_of": []}}),
    ("resolution", {"error": 3}), ("resolution", {"error": "x", "variable": []}),
    ("resolution", {"error": "x", "extra": 1}), ("resolution", nested(900)),
    ("resolution", nested(40)), ("probe", nested(40)), ("hostname", ["x"]),
    ("hostname", "h" * 201), ("created", {}), ("slurmenv_version", 3),
    ("files_not_recorded", {"SLURM_HOSTFILE": 1}),
])
def test_show_and_doctor_refuse_a_malformed_field_naming_it(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], field: str, value: Any
) -> None:
    """show --from gave a traceback for these (AttributeError, RecursionError), doctor --from
    refused some: both now refuse each in load(), one check for both."""
    path = crafted(tmp_path, **{field: value})
    assert main(["show", "--from", path]) == 1
    _, err = capsys.readouterr()
    assert "internal error" not in err and "variable: --from=" in err
    assert f"'{field}" in err or "nest" in err, err
    assert main(["doctor", "--from", path]) == 2
    _, err = capsys.readouterr()
    assert "internal error" not in err and "variable: --from=" in err


RESOLUTIONS = st.fixed_dictionaries(
    {}, optional={"summary": JSON | st.fixed_dictionaries({}, optional={
        "sources": JSON | st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
        "master_port": JSON, "rank": JSON}),
        "env": JSON, "layout": JSON | st.fixed_dictionaries({}, optional={
            "hosts": JSON, "node_of": JSON, "local_of": JSON}),
        "error": JSON, "variable": JSON, "value": JSON, "fix": JSON},
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(
    st.sampled_from([*FIELDS, "files_not_recorded"]), JSON, max_size=3),
    resolution=st.none() | RESOLUTIONS)
def test_show_and_doctor_from_any_dump_report_or_refuse(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any],
    resolution: dict[str, Any] | None,
) -> None:
    """Every dump field, through the command line: a complete report or a clean refusal, never
    a traceback ('internal error', exit 70), for show --from (text and --json) and doctor."""
    if resolution is not None:
        changes = {**changes, "resolution": {**HEALTHY["resolution"], **resolution}}
    path = crafted(tmp_path, **changes)
    for command, ok in ((["show", "--from", path], (0, 1)),
                        (["show", "--from", path, "--json"], (0, 1)),
                        (["doctor", "--from", path], (0, 1, 2))):
        status = main(command)
        out, err = capsys.readouterr()
        assert status in ok, (command, err)
        assert "internal error" not in err and "Traceback" not in out + err
        assert out or "slurmenv: error:" in err


@pytest.mark.parametrize(("name", "value", "secret"), [
    ("GIT_REMOTE", "https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r", "ghp_16C7"),
    ("MY_SETTING", "ghp_16C7e42F292c6912E7710c838347Ae178B4a", "ghp_16C7"),
    ("NOTE", "use glpat-xxxxxxxxxxxxxxxxxxxx for the mirror", "glpat-"),
    ("https_proxy", "http://proxy:3128/?access_token=s3cr3t&region=eu", "s3cr3t"),
    ("HTTP_PROXY", "http://proxy:3128/path;api_key=s3cr3t", "s3cr3t"),
    ("WANDB_BASE_URL", "https://wandb.example/?token=s3cr3t", "s3cr3t"),
])
def test_dump_redacts_variables_by_the_shape_of_their_value(
    name: str, value: str, secret: str
) -> None:
    # the rule of the files, for variables: a token of a well-known form, a URL's credentials
    from slurmenv.launchers import base

    kept = base.redact(name, value)
    assert secret not in kept and "REDACTED" in kept, kept
    assert base.redact("https_proxy", "http://proxy:3128/?region=eu") == \
        "http://proxy:3128/?region=eu"
    assert base.redact("SLURM_JOB_NODELIST", "r1n[09-10]") == "r1n[09-10]"
