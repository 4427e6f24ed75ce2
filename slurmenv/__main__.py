"""``python -m slurmenv``: the same as the ``slurmenv`` command."""

from .commands.main import entry_point

entry_point()
