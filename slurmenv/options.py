"""User choices that change a resolution, from keyword arguments or ``SLURMENV_*`` variables.

Variables let a choice made once in the batch script reach every task through ``srun``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._compat import NamedTuple  # not typing's: see _compat
from .errors import SlurmEnvError
from .ports import DEFAULT_RANGE, parse_port, parse_range

TRUE = ("1", "true", "yes", "on")
FALSE = ("", "0", "false", "no", "off")


class Options(NamedTuple):
    """Resolution options (all optional).

    * ``port``: force ``MASTER_PORT`` (``SLURMENV_PORT``; an inherited ``MASTER_PORT`` also counts).
    * ``port_range``: ``(lo, hi)`` for the job/step formula (``SLURMENV_PORT_RANGE``).
    * ``addr_template``: e.g. ``"{host}-ib"`` for a fast network's names (``SLURMENV_ADDR_TEMPLATE``).
    * ``resolve_addr``: turn ``MASTER_ADDR`` into an IP address with one DNS lookup
      (``SLURMENV_RESOLVE_ADDR=1``); the only option that touches DNS.
    * ``tf_chief``: make rank 0 TensorFlow's ``chief`` (``SLURMENV_TF_CHIEF=1``).
    * ``bind_gpus``: give each task of a node its share of the GPU list the node's tasks share
      (``SLURMENV_BIND_GPUS=1``; off by default; see ``slurmenv.gpus``).
    * ``threads``: set ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS``
      when unset (on by default; ``SLURMENV_THREADS=0`` turns it off; see ``slurmenv.threads``).
    """

    port: int | None = None
    port_range: tuple[int, int] = DEFAULT_RANGE
    addr_template: str | None = None
    resolve_addr: bool = False
    tf_chief: bool = False
    bind_gpus: bool = False
    threads: bool = True


def _flag(environ: Mapping[str, str], name: str, default: bool = False) -> bool:
    if not environ.get(name, "").strip():
        return default
    value = environ[name].strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise SlurmEnvError(
        f"{name} must be a yes/no flag", variable=name, value=environ.get(name), fix="use 1 or 0"
    )


def check_template(template: str, variable: str) -> str:
    """A host template must contain ``{host}`` and nothing else in braces."""
    # Parse rather than format: "{host.upper}" or "{host:>999999999}" would run code or
    # exhaust memory when formatted.
    from string import Formatter  # only when a template is given (not on export's path)

    try:
        fields = [field for _, field, spec, conv in Formatter().parse(template)
                  if field is not None or spec or conv]
    except ValueError:
        fields = None
    ok = bool(fields) and all(field == "host" for field in fields or ()) and "{host}" in template
    if not ok:
        raise SlurmEnvError(
            "address template must contain {host} and no other {field}",
            variable=variable,
            value=template,
            fix="write it like '{host}-ib' or '{host}i.fabric'",
        )
    return template


def from_environ(environ: Mapping[str, str], **given: object) -> Options:
    """Options from ``SLURMENV_*`` variables, overridden by the keyword arguments not None."""
    values: dict[str, object] = {}
    if environ.get("SLURMENV_PORT"):
        values["port"] = parse_port(environ["SLURMENV_PORT"], "SLURMENV_PORT")
    if environ.get("SLURMENV_PORT_RANGE"):
        values["port_range"] = parse_range(environ["SLURMENV_PORT_RANGE"], "SLURMENV_PORT_RANGE")
    if environ.get("SLURMENV_ADDR_TEMPLATE"):
        values["addr_template"] = check_template(
            environ["SLURMENV_ADDR_TEMPLATE"], "SLURMENV_ADDR_TEMPLATE"
        )
    values["resolve_addr"] = _flag(environ, "SLURMENV_RESOLVE_ADDR")
    values["tf_chief"] = _flag(environ, "SLURMENV_TF_CHIEF")
    values["bind_gpus"] = _flag(environ, "SLURMENV_BIND_GPUS")
    values["threads"] = _flag(environ, "SLURMENV_THREADS", default=True)
    for key, value in given.items():
        if key not in Options._fields:
            raise TypeError(f"unknown option {key!r}")
        if value is None:
            continue
        if key == "port_range" and isinstance(value, str):
            value = parse_range(value, "--port-range")
        elif key == "port" and isinstance(value, str):
            value = parse_port(value, "--port")
        elif key == "addr_template" and isinstance(value, str):
            value = check_template(value, "--addr-template")
        values[key] = value
    return Options(**values)  # type: ignore[arg-type]
