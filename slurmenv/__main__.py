"""``python -m slurmenv``: the same as the ``slurmenv`` command."""

import sys

from .cli import main

sys.exit(main())
