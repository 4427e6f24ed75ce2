"""``slurmenv dump``: record what slurmenv reads in one task, to replay it anywhere.

A dump is a JSON file holding

* ``environ``: the variables slurmenv reads (:data:`VARIABLES`, plus every ``SLURMENV_*``) and
  nothing else: no secrets. Proxy values keep their host but lose any ``user:password@``;
* ``ephemeral_range``: this node's ``/proc/sys/net/ipv4/ip_local_port_range``;
* ``step_evidence``: local evidence of a Slurm task step (a ``slurmstepd`` ancestor), which
  refuses the single-process default in a scrubbed environment;
* ``files``: the content of the files the launchers read (:data:`FILE_VARIABLES`: Slurm's
  ``SLURM_HOSTFILE`` for ``-m arbitrary``, PALS's apinfo file, ``PBS_NODEFILE``, LSF's rank
  file), which the layout needs and which may be gone later (PALS removes its apinfo file when
  the application ends); binary ones (the apinfo file) under ``binary_files``, base64;
* ``options``: resolution options given on the command line of ``dump``;
* ``resolution``: what slurmenv resolved there (or the error it gave), so a replay can prove it
  reproduces the same answer;
* ``probe`` (with ``--probe``): the node facts ``slurmenv doctor`` looks at (the master's
  address as this node resolves it, the interface reaching it, listening ports, CPUs).

``slurmenv show --from FILE`` and ``slurmenv doctor --from FILE`` replay it on any machine.

Layout: ``allowlist.py`` (what a dump may hold of the environment), ``capture.py`` (writing
one: collect, file names, exclusive creation), ``replay.py`` (reading one back, checked, and
comparing its replay with the recording: ``--from``), ``command.py`` (the command line).
"""

from __future__ import annotations

# The names of slurmenv.dump when it was one module, re-exported (``X as X``; no __all__, whose
# 'SLURM_VARIABLES' tests/test_dump.py would take for a variable slurmenv reads).
from .allowlist import FILE_VARIABLES as FILE_VARIABLES
from .allowlist import NODE_VARIABLES as NODE_VARIABLES
from .allowlist import OUTPUT_VARIABLES as OUTPUT_VARIABLES
from .allowlist import PREFIXES as PREFIXES
from .allowlist import PROXY_VARIABLES as PROXY_VARIABLES
from .allowlist import REDACTED as REDACTED
from .allowlist import SLURM_VARIABLES as SLURM_VARIABLES
from .allowlist import VARIABLES as VARIABLES
from .allowlist import is_read as is_read
from .allowlist import redact_proxy as redact_proxy
from .allowlist import select as select
from .capture import DEFAULT_OUTPUT as DEFAULT_OUTPUT
from .capture import FILE_LIMIT as FILE_LIMIT
from .capture import FORMAT as FORMAT
from .capture import FORMAT_KEY as FORMAT_KEY
from .capture import NOT_RECORDED as NOT_RECORDED
from .capture import collect as collect
from .capture import expand_output as expand_output
from .capture import record as record
from .capture import write_new as write_new
from .command import build_parser as build_parser
from .command import main as main
from .command import options_from_args as options_from_args
from .replay import FREE_PORT_SOURCE as FREE_PORT_SOURCE
from .replay import LOAD_COST_LIMIT as LOAD_COST_LIMIT
from .replay import LOAD_DEPTH_LIMIT as LOAD_DEPTH_LIMIT
from .replay import LOAD_FIX as LOAD_FIX
from .replay import LOAD_LIMIT as LOAD_LIMIT
from .replay import Dump as Dump
from .replay import differences as differences
from .replay import essential as essential
from .replay import load as load
from .replay import replay_report as replay_report
from .replay import same_values as same_values
