"""What a task tells rank 0: its facts (a pure function of its Resolution and options)."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from typing import Any

from ... import __version__
from ...errors import SlurmEnvError
from ...resolution import Resolution
from .protocol import STRING_CAP, UNKNOWN


def _cap(value: object) -> str:
    return str(value)[:STRING_CAP]


def tf_digest(res: Resolution) -> str:
    """8 hex digits of TF_CONFIG's worker list (as ``show --one-line``'s ``cluster=``), or
    ``none`` where TF_CONFIG cannot be built."""
    import hashlib

    try:
        cluster = res.tf_config.get("cluster", {})
    except SlurmEnvError:
        return "none"
    return hashlib.sha1(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:8]


def facts_of(res: Resolution, opts: Mapping[str, Any]) -> dict[str, Any]:
    """What a task sends rank 0 (and what rank 0 compares with its own): every field of
    :data:`protocol.FIELDS` but ``via`` (the client adds it), none of them null."""
    def known(name: str, value: int) -> int | str:
        return UNKNOWN if name in res.unknown else value

    return {
        "rank": res.rank,
        "world_size": res.world_size,
        "node": _cap(res.hostname or socket.gethostname()),
        "hostname": _cap(socket.gethostname()),
        "node_rank": known("NODE_RANK", res._node_rank),
        "nnodes": known("NNODES", res._nnodes),
        "master_addr": _cap(res.master_addr),
        "master_port": res.master_port,
        "tf_digest": tf_digest(res),
        "launcher": _cap(res.launcher),
        "job": _cap(res.job_id or ""), "step": _cap(res.step_id or ""),
        "version": __version__,
        # the port is compared as MASTER_PORT, with where it came from
        "options": {k: _cap(v) for k, v in sorted(opts.items()) if k != "port"},
        "sources": {k: _cap(res.sources.get(k, "")) for k in
                    ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NNODES", "TF_CONFIG")},
    }


#: What every task must agree on with rank 0: (key of facts_of, how the report names it,
#: the Resolution source that explains it).
AGREE = (
    ("world_size", "WORLD_SIZE", "WORLD_SIZE"),
    ("master_addr", "MASTER_ADDR", "MASTER_ADDR"),
    ("master_port", "MASTER_PORT", "MASTER_PORT"),
    ("nnodes", "NNODES", "NNODES"),
    ("tf_digest", "TF_CONFIG workers", "TF_CONFIG"),
    ("launcher", "launcher", None),
    ("job", "job", None),
    ("step", "step", None),
    ("version", "slurmenv version", None),
    ("options", "options", None),
)
