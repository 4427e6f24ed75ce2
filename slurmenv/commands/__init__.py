"""slurmenv's commands: ``main`` is the ``slurmenv`` command (export, exec, and the others by
name), one module per other command, ``console`` what their command lines share."""
