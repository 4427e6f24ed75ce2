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

Layout: ``allowlist.py`` (what a dump may hold of the environment), ``probe.py`` (the node
facts), ``capture.py`` (writing one: collect, file names, exclusive creation), ``replay.py``
(reading one back, checked, and comparing its replay with the recording: ``--from``),
``command.py`` (the command line).
"""

from __future__ import annotations

from ..lean import lazy

#: The public names, each loaded from its module on first use.
__getattr__ = lazy(__name__, {name: f".{module}" for module, names in {
    "allowlist": ("VARIABLES", "is_read", "redact_proxy", "select"),
    "capture": ("DEFAULT_OUTPUT", "FILE_LIMIT", "NOT_RECORDED", "collect", "expand_output",
                "write_new"),
    "command": ("build_parser", "main", "options_from_args"),
    "replay": ("LOAD_COST_LIMIT", "LOAD_DEPTH_LIMIT", "LOAD_LIMIT", "Dump", "differences",
               "load", "replay_report", "same_values"),
}.items() for name in names})
