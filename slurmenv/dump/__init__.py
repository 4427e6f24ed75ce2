"""``slurmenv dump``: record what slurmenv reads in one task, to replay it anywhere
(``slurmenv show --from FILE``, ``slurmenv doctor --from FILE``).

A dump is a JSON file: ``environ``, the variables slurmenv reads (:data:`VARIABLES`, every
``SLURMENV_*``) and nothing else, credentials redacted; ``ephemeral_range``; ``step_evidence``
(a ``slurmstepd`` ancestor); ``enclosure`` (a launcher's agent among the ancestors, such as
torchrun's, which the world guard asks for when torchrun's world is not the step's); ``files`` (``binary_files``, base64), the content of the files the
launchers read (:data:`FILE_VARIABLES`), which may be gone later; ``options``; ``resolution``,
what slurmenv resolved there (or its error), which a replay must reproduce; ``probe`` (with
``--probe``), the node facts ``slurmenv doctor`` looks at; ``redacted``, how many of its
strings were redacted as credentials (``secrets.py``).

Layout: ``allowlist.py`` (what a dump may hold of the environment), ``probe.py`` (the node
facts), ``capture.py`` (writing one), ``secrets.py`` (the one filter that keeps every secret
out of the whole record, applied last), ``replay.py`` (reading one back, checked, and comparing
its replay with the recording); the command line is ``commands/dump.py``.
"""

from __future__ import annotations

from ..lean import lazy

#: The public names, each loaded from its module on first use.
__getattr__ = lazy(__name__, {name: f".{module}" for module, names in {
    "allowlist": ("VARIABLES", "is_read", "redact_proxy", "select"),
    "capture": ("DEFAULT_OUTPUT", "FILE_LIMIT", "NOT_RECORDED", "collect", "expand_output",
                "write_new"),
    "replay": ("LOAD_COST_LIMIT", "LOAD_DEPTH_LIMIT", "LOAD_LIMIT", "Dump", "differences",
               "load", "replay_report", "same_values"),
}.items() for name in names})
