"""The documented-only launcher fixtures (tests/fixtures/beyond/) cite a source for every value.

These launchers (PBS+PALS's PMI_* and PALS_LOCAL_*, Kubernetes operators, Flux, LSF jsrun) do
not run here, so each fixture says where each variable's meaning comes from; a value added
without a source fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "beyond"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))


def test_all_launchers_have_fixtures() -> None:
    assert NAMES == ["flux", "kubeflow_pytorchjob", "lsf_jsrun", "pbs_pals", "trainer_v2", "volcano"]


@pytest.mark.parametrize("name", NAMES)
def test_every_value_cites_a_source(name: str) -> None:
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    assert data["evidence"].startswith("fixture only")
    sources = data["sources"]
    assert sources and all(len(text) > 40 for text in sources.values())
    used = set()
    for case in data["cases"]:
        cite = {**data["cite"], **case.get("cite", {})}
        assert case["tasks"] and case["expect"]
        for task in case["tasks"]:
            for variable in task["env"]:
                assert cite.get(variable), f"{name}/{case['name']}: {variable} has no source"
        used.update(key for key in sources for text in cite.values() if key in text)
    assert used == set(sources), f"{name}: sources never cited: {set(sources) - used}"
