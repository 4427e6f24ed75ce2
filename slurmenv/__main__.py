"""``python -m slurmenv``: the same as the ``slurmenv`` command."""

from .cli import entry_point

entry_point()
