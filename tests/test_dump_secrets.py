"""No secret in a dump, whatever path a value takes (issue 42, item 4): tokens planted in every
variable a dump may hold (the allow-list, derived from the launchers' declarations), every
option of the options table, every file a launcher reads and slurm.conf/topology.conf, each
in the shapes ``launchers.base`` recognises, are found nowhere in the dump: not in its
environment, its files, nor any string of the recorded resolution or refusal
(slurmenv/dump/secrets.py). And a replay of a redacted dump says why it differs."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
import synth

from slurmenv import SlurmEnvError, dump, options
from slurmenv.dump import capture
from slurmenv.dump.secrets import REDACTED, scrub, scrub_text

HOSTS = ["r1n09", "r1n10"]
BASE = synth.step_env(HOSTS, [2, 2], 1)

#: What must never be found in a dump: the secret part of each planted value.
SECRETS = ("ghp_PLANTED0a1b2c", "hunter2PLANTED", "AKIAPLANTED0123456", "eyJPLANTED0.e30.sig",
           "glpat-PLANTED9z", "PLANTEDcredentialvalue")
#: A credential variable of the task (redacted by name): its value planted elsewhere too.
CREDENTIAL = ("SLURMENV_API_TOKEN", "PLANTEDcredentialvalue")
#: The shapes a secret takes in a value: alone, in a URL, inside a word, after separators.
PAYLOADS = (
    "ghp_PLANTED0a1b2c",
    "https://u:hunter2PLANTED@r1n09",
    "u:hunter2PLANTED@r1n09",
    "r1n09-ghp_PLANTED0a1b2c",
    "{host}.ghp_PLANTED0a1b2c",
    "AKIAPLANTED0123456",
    "n1,eyJPLANTED0.e30.sig",
    "x/glpat-PLANTED9z",
    "'ghp_PLANTED0a1b2c'",
    "http://r1n09/?access_token=hunter2PLANTED",
    "Password=hunter2PLANTED",
    "PLANTEDcredentialvalue",
)


def leaks(data: Any) -> list[str]:
    text = json.dumps(data)
    return [secret for secret in SECRETS if secret in text]


def planted(name: str, value: str) -> dict[str, str]:
    return {**BASE, CREDENTIAL[0]: CREDENTIAL[1], name: value}


#: Every variable the resolver reads that a dump may record: the allow-list (every launcher's
#: VARIABLES and TASK_VARIABLES, the Slurm, node, proxy and output variables) and the options
#: table's variables, plus one of every PREFIXES family.
VARIABLES = sorted({*dump.VARIABLES, *(row.variable for row in options.TABLE),
                    *(f"{prefix}0" for prefix in dump.allowlist.PREFIXES)})


@pytest.mark.parametrize("name", VARIABLES)
def test_a_token_planted_in_any_variable_is_in_no_part_of_the_dump(name: str) -> None:
    for value in PAYLOADS:
        data = dump.collect(planted(name, value))
        assert not leaks(data), (name, value, leaks(data))


@pytest.mark.parametrize("row", options.TABLE, ids=[row.field for row in options.TABLE])
def test_a_token_planted_in_any_option_is_in_no_part_of_the_dump(row: Any) -> None:
    for value in PAYLOADS:
        data = dump.collect(planted("SLURM_JOB_NAME", "train"), options={row.field: value})
        assert not leaks(data), (row.field, value, leaks(data))


@pytest.mark.parametrize("name", dump.allowlist.FILE_VARIABLES)
def test_a_token_planted_in_a_file_a_launcher_reads_is_in_no_part_of_the_dump(
    name: str, tmp_path: pathlib.Path
) -> None:
    for i, value in enumerate(PAYLOADS):
        path = tmp_path / f"f{i}"
        path.write_text(f"r1n09\n{value}\nr1n10\n")
        data = dump.collect(planted(name, str(path)))
        assert not leaks(data), (name, value, leaks(data))


SLURM_CONF_LINES = (
    "TopologyPlugin=topology/tree ghp_PLANTED0a1b2c",
    "'TopologyPlugin=topology/tree' # u:hunter2PLANTED@r1n09",
    "SelectType=select/linear # AKIAPLANTED0123456",
    "TopologyPlugin=topology/tree\\ eyJPLANTED0.e30.sig",
    "Include ghp_PLANTED0a1b2c.conf",
    "Include %c-glpat-PLANTED9z.conf",
    "TopologyPlugin=x/glpat-PLANTED9z",
    "TopologyPlugin=PLANTEDcredentialvalue",
)
TOPOLOGY_LINES = (
    "SwitchName=ghp_PLANTED0a1b2c Nodes=r1n09",
    "SwitchName=s1 Nodes=r1n09 Junk=u:hunter2PLANTED@r1n09",
    "BlockName=AKIAPLANTED0123456 Nodes=r1n[09-10]",
)


@pytest.mark.parametrize("line", [*SLURM_CONF_LINES, *TOPOLOGY_LINES])
def test_a_token_in_slurm_conf_or_topology_conf_is_in_no_part_of_the_dump(
    line: str, tmp_path: pathlib.Path
) -> None:
    conf, topology = tmp_path / "slurm.conf", tmp_path / "topology.conf"
    if line in TOPOLOGY_LINES:
        conf.write_text("TopologyPlugin=topology/tree\n")
        topology.write_text(line + "\n")
    else:
        conf.write_text(line + "\n")
        topology.write_text("SwitchName=s1 Nodes=r1n[09-10]\n")
    env = {**planted("SLURM_CONF", str(conf)), "SLURM_JOB_SLUID": "a1b2",
           "SLURM_DISTRIBUTION": "block"}
    data = dump.collect(env)
    assert not leaks(data), (line, leaks(data))


def test_the_issue_cases_are_redacted_where_the_resolution_recorded_them() -> None:
    # an inherited MASTER_ADDR URL in the summary; a token in SLURMENV_ADDR_TEMPLATE in
    # master_addr and its source (issue 42): the rest of each string is kept
    data = dump.collect({**BASE, "SLURMENV_ADDR_TEMPLATE": "{host}-ghp_PLANTED0a1b2c"})
    summary = data["resolution"]["summary"]
    assert summary["master_addr"] == f"r1n09-{REDACTED}" and not leaks(data)
    assert data["redacted"] > 0


def test_a_token_in_a_variables_name_is_in_no_part_of_the_dump() -> None:
    data = dump.collect({**BASE, "SLURMENV_X_ghp_PLANTED0a1b2c": "1"})
    assert not leaks(data) and f"SLURMENV_X_{REDACTED}" in data["environ"]


def test_every_redaction_is_counted_the_environments_too() -> None:
    assert dump.collect({**BASE, CREDENTIAL[0]: CREDENTIAL[1]})["redacted"] == 1
    proxy = dump.collect({**BASE, "https_proxy": "http://u:hunter2PLANTED@proxy:3128"})
    assert proxy["environ"]["https_proxy"] == f"http://{REDACTED}@proxy:3128"
    assert proxy["redacted"] == 1 and not leaks(proxy)


def test_a_dump_without_secrets_is_not_changed() -> None:
    data = dump.collect(BASE)
    assert data["redacted"] == 0
    assert scrub(dict(data), BASE) == data


@pytest.mark.parametrize(("text", "kept"), [
    ("MASTER_ADDR=r1n09:29500", True), ("slurm.conf:3: SwitchName=s1", True),
    ("user@host", True), ("c[1-4],n1:8", True), ("EURASIA1", True), ("keyJ", True),
    ("https://r1n09:8080/x?a=1", True),
    ("x:ghp_a", False), ("x/ghp_a", False), ("x,ghp_a", False), ("'ghp_a'", False),
    ('"ghp_a"', False), ("x;ghp_a", False), ("x@ghp_a", False), ("x-ghp_a", False),
    ("a.AKIAX", False), ("MY_SECRET: abcdef", False), ("?api_key=v", False),
])
def test_scrub_text_splits_at_every_separator_and_keeps_plain_text(text: str, kept: bool) -> None:
    assert (scrub_text(text) == text) is kept, scrub_text(text)


@pytest.mark.parametrize("extra", [
    {"SLURMENV_ADDR_TEMPLATE": "{host}-ghp_PLANTED0a1b2c"},
    {"MASTER_ADDR": "https://u:hunter2PLANTED@x"},
    {"SLURMENV_MASTER_ADDR": "u:hunter2PLANTED@x"},
    {"SLURMENV_MASTER_ADDR": "PLANTEDcredentialvalue"},
    {"CUDA_VISIBLE_DEVICES": "ghp_PLANTED0a1b2c"},
])
def test_a_redacted_dump_replays_its_values_or_says_why_not(
    extra: dict[str, str], tmp_path: pathlib.Path
) -> None:
    from slurmenv.dump.replay import replay_report

    data = dump.collect(planted("SLURM_JOB_NAME", "train") | extra)
    assert data["redacted"] > 0 and not leaks(data)
    path = tmp_path / "d.json"
    capture.write_new(str(path), json.dumps(data))
    loaded = dump.load(str(path))
    assert loaded.redacted == data["redacted"]
    with loaded.environment():
        try:
            replayed = capture.record(loaded.resolve())
        except SlurmEnvError as exc:
            replayed = capture.error_dict(exc)
    lines = replay_report(loaded, replayed)
    assert lines[0].startswith(("replay: identical", "replay: same values")), lines
    # where a redacted value changes what the replay resolves, the report says why
    assert loaded.recorded is not None
    changed = loaded._replace(recorded={**loaded.recorded, "summary": {"rank": -1}})
    lines = replay_report(changed, replayed)
    assert lines[0].startswith("replay: DIFFERS")
    assert any(f"({data['redacted']} value(s) were redacted as credentials" in line
               for line in lines), lines


def test_a_redacted_count_that_is_no_count_is_refused(tmp_path: pathlib.Path) -> None:
    data = dump.collect(BASE)
    path = tmp_path / "d.json"
    capture.write_new(str(path), json.dumps({**data, "redacted": "x"}))
    with pytest.raises(SlurmEnvError, match="redacted"):
        dump.load(str(path))


@pytest.mark.parametrize("separator", [" ", "\t", "=", ":", ",", ";", "@", "/", "'", '"'])
def test_the_token_rule_splits_words_at_every_separator(separator: str) -> None:
    # base.holds_token, the rule a variable's value and a file's line go through (a token
    # after ':', ',', '/' or a quote was kept when it split only at blanks and '=')
    from slurmenv.launchers import base

    assert base.holds_token(f"r1n09{separator}ghp_PLANTED0a1b2c")
    assert base.looks_like_credential(f"r1n09{separator}ghp_PLANTED0a1b2c")
    assert base.redact("SLURMENV_MASTER_ADDR", f"r1n09{separator}ghp_x") == REDACTED
    assert not base.holds_token(f"r1n09{separator}n1")
