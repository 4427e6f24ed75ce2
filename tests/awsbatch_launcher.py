"""A launcher module for the tests only: AWS Batch multi-node parallel jobs, written to
``docs/design.md``'s recipe as a maintainer would (issue 26), never registered in the package.

Tests register it (``register``) to show that a new launcher declaring its own variables is
covered by the fallback rule with no special case: ``AWS_BATCH_JOB_NUM_NODES`` without
``AWS_BATCH_JOB_NODE_INDEX`` is refused, not a single process.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import pytest

from slurmenv import launchers
from slurmenv.launchers.base import Task, Topology, node_sources, read_int

NAME = "awsbatch"
VARIABLES = ("AWS_BATCH_JOB_ID", "AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_NUM_NODES",
             "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS")
PREFIXES: tuple[str, ...] = ()
#: Set by AWS Batch in every container of a multi-node parallel job.
TASK_VARIABLES = ("AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_NUM_NODES",
                  "AWS_BATCH_JOB_MAIN_NODE_INDEX", "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS")
FALLBACK = False
WORLD = (("rank", "AWS_BATCH_JOB_NODE_INDEX"), ("world_size", "AWS_BATCH_JOB_NUM_NODES"))
ENCLOSED_BY: tuple[str, ...] = ()
WHY_EMPTY = {"PREFIXES": "every variable read is named in VARIABLES"}
FIX = "run it in a container of an AWS Batch multi-node parallel job"


def detect(environ: Mapping[str, str]) -> bool:
    return bool(environ.get("AWS_BATCH_JOB_NODE_INDEX") and environ.get("AWS_BATCH_JOB_NUM_NODES"))


def read(environ: Mapping[str, str]) -> Task:
    node = read_int(environ, "AWS_BATCH_JOB_NODE_INDEX", FIX)
    nodes = read_int(environ, "AWS_BATCH_JOB_NUM_NODES", FIX, minimum=1)
    told = "AWS_BATCH_JOB_NODE_INDEX (one process per node)"
    return Task(
        launcher=NAME, rank=node, local_rank=0, world_size=nodes, local_world_size=1,
        node_rank=node, nnodes=nodes, hostname="ip-10-0-0-1",
        sources={"RANK": told, "LOCAL_RANK": "one process per node", "WORLD_SIZE": told,
                 "LOCAL_WORLD_SIZE": "one process per node",
                 **node_sources(told, "AWS_BATCH_JOB_NUM_NODES")},
        master_host=environ.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"),
        master_source="AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS",
        port_seed=None, port_seed_source="no job number", reserved_ports=None,
        topology=Topology(),
    )


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put this module in the registry, before the single-process default."""
    monkeypatch.setitem(sys.modules, f"{launchers.__name__}.{NAME}", sys.modules[__name__])
    monkeypatch.setattr(launchers, "REGISTRY", (*launchers.REGISTRY[:-1], NAME, "local"))
