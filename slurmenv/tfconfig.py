"""TensorFlow's ``TF_CONFIG``: the worker list in rank order and this task's place in it."""

from __future__ import annotations

from .errors import SlurmEnvError, is_number, require_list
from .lean import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

# Linux refuses to exec with one environment string over MAX_ARG_STRLEN (128 KiB), counting
# "TF_CONFIG=" and the terminating NUL.
MAX_ARG_STRLEN = 128 * 1024
MAX_VALUE = MAX_ARG_STRLEN - len("TF_CONFIG=") - 1


def _plain(text: str) -> bool:
    """True when JSON writes ``text`` as it is between double quotes (``json.dumps``, ASCII
    output): printable ASCII without ``"`` or ``\\``. Host names and ports always are."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def _quote(text: str) -> str:
    """``json.dumps(text)``. A plain string needs no encoder; any other is quoted by json's own
    C encoder, imported only then: loading its extension module (``_json``) would cost every
    task of a step about 0.3 ms on export's path."""
    if _plain(text):
        return '"' + text + '"'
    try:
        from _json import encode_basestring_ascii
    except ImportError:  # pragma: no cover - CPython always has _json
        from json.encoder import encode_basestring_ascii
    return encode_basestring_ascii(text)


# -- job roles (--tf-jobs) ------------------------------------------------------------------
#: TensorFlow's task types, in the order ranks are given to them: sorted by name, as
#: TensorFlow's own ``SlurmClusterResolver(jobs=...)`` does (the chief gets rank 0).
JOB_NAMES = ("chief", "evaluator", "ps", "worker")
JOBS_VARIABLE = "SLURMENV_TF_JOBS"


def parse_jobs(text: str) -> list[tuple[str, int]]:
    """``[(job, count), ...]`` of ``chief=1,ps=2,worker=4``, in :data:`JOB_NAMES` order.

    Raises ValueError saying what is wrong: an unknown job name, a count that is not a whole
    number of 1 or more, a job given twice, more than one chief or evaluator, or roles no
    TensorFlow strategy can use (``ps`` without a ``chief`` to coordinate or without workers,
    no ``chief`` or ``worker`` to train).
    """
    counts: dict[str, int] = {}
    for item in text.split(","):
        name, equals, count = (part.strip() for part in item.partition("="))
        if not equals or not name:
            raise ValueError(f"{item.strip()!r} is not JOB=COUNT")
        if name not in JOB_NAMES:
            raise ValueError(f"unknown TensorFlow job {name!r} (known: {', '.join(JOB_NAMES)})")
        if name in counts:
            raise ValueError(f"job {name!r} is given twice")
        if not is_number(count) or len(count) > 9 or int(count) < 1:  # the one number rule
            raise ValueError(f"the count of {name!r} must be a whole number, 1 or more")
        counts[name] = int(count)
    for name in ("chief", "evaluator"):
        if counts.get(name, 0) > 1:
            raise ValueError(f"TensorFlow allows at most one {name} (asked for {counts[name]})")
    if "ps" in counts and ("chief" not in counts or "worker" not in counts):
        raise ValueError("parameter servers (ps) need a chief to run ParameterServerStrategy's "
                         "coordinator and workers to run its functions")
    if "chief" not in counts and "worker" not in counts:
        raise ValueError("no task trains: give a chief or workers")
    return [(name, counts[name]) for name in JOB_NAMES if name in counts]


def jobs_text(jobs: Sequence[tuple[str, int]]) -> str:
    """``chief=1,ps=2,worker=4``: the text of :func:`parse_jobs`' result."""
    return ",".join(f"{name}={count}" for name, count in jobs)


def canonical_jobs(text: str, variable: str = JOBS_VARIABLE) -> str:
    """The ``--tf-jobs`` option's reader: the jobs in :data:`JOB_NAMES` order."""
    return jobs_text(parse_jobs(text))


def jobs_from(jobs: str | None, environ: Mapping[str, str]) -> str:
    """The option that gave ``jobs`` (the ``tf_jobs`` taken): ``SLURMENV_TF_JOBS`` when its
    value is the one taken, else ``--tf-jobs`` (the command line or the keyword won)."""
    text = environ.get(JOBS_VARIABLE)
    if not jobs or not text:
        return "--tf-jobs" if jobs else JOBS_VARIABLE
    try:
        return JOBS_VARIABLE if canonical_jobs(text) == jobs else "--tf-jobs"
    except ValueError:
        return "--tf-jobs"


def roles(world_size: int, chief: bool = False, jobs: str | None = None,
          variable: str = JOBS_VARIABLE) -> list[tuple[str, int]]:
    """``(task type, index)`` of every rank: with ``jobs`` (``--tf-jobs``), consecutive
    slices of the ranks in :data:`JOB_NAMES` order; else ``worker`` r, or, with ``chief``
    (``--tf-chief``), rank 0 the ``chief`` and the others worker 0..n-2.

    Refuses (naming ``variable``: ``SLURMENV_TF_JOBS``, or ``--tf-jobs`` when the command line
    gave them) counts that do not add up to ``world_size`` and ``jobs`` given with ``chief``.
    """
    if not jobs:
        if chief:
            return [("chief", 0)] + [("worker", r) for r in range(world_size - 1)]
        return [("worker", r) for r in range(world_size)]
    parsed = parse_jobs(jobs)
    if chief:
        raise SlurmEnvError(
            "--tf-chief and --tf-jobs both say which rank is the chief", variable=variable,
            value=jobs, fix="drop --tf-chief (SLURMENV_TF_CHIEF): chief=1 in --tf-jobs makes "
            "rank 0 the chief")
    total = sum(count for _, count in parsed)
    if total != world_size:
        fixed = [(name, count) for name, count in parsed if name != "worker"]
        others = sum(count for _, count in fixed)
        hint = ""
        if world_size > others:
            hint = ", e.g. " + jobs_text([*fixed, ("worker", world_size - others)])
        raise SlurmEnvError(
            f"the TensorFlow jobs add up to {total} tasks, but the step has {world_size}",
            variable=variable, value=jobs,
            fix=f"make the counts add up to the step's {world_size} tasks{hint}, or start "
            f"{total} task{'s' if total != 1 else ''} (srun -n {total})")
    return [(name, index) for name, count in parsed for index in range(count)]


def build(workers: Sequence[str], rank: int, chief: bool = False, jobs: str | None = None,
          variable: str = JOBS_VARIABLE) -> dict[str, Any]:
    """``{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": rank}}``.

    ``workers[r]`` is ``host:port`` of rank ``r``. With ``chief``, rank 0 becomes the single
    ``chief`` and the others are workers 0..n-2. With ``jobs`` (``chief=1,ps=2,worker=4``),
    the ranks are cut into the jobs by :func:`roles`; the ``evaluator`` stays out of the
    cluster, as TensorFlow requires (its own task says ``evaluator``, index 0).
    """
    require_list(workers, "workers", "a list of 'host:port' strings, one per rank")
    if not chief and not jobs:
        return {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": rank}}
    every = roles(len(workers), chief, jobs, variable)
    cluster: dict[str, list[str]] = {}
    for address, (name, _) in zip(workers, every):
        if name != "evaluator":
            cluster.setdefault(name, []).append(address)
    name, index = every[rank]
    return {"cluster": cluster, "task": {"type": name, "index": index}}


def _compact(value: Any) -> str:
    """``json.dumps(value, separators=(",", ":"))`` for dicts (str keys), lists, str and int."""
    kind = type(value)
    if kind is str:
        return _quote(value)
    if kind is int:
        return int.__repr__(value)
    if kind is list:
        try:  # the worker list: all strings, and all plain (checked at once, joined in C)
            plain = value and _plain("".join(value))
        except TypeError:
            return "[" + ",".join([_compact(item) for item in value]) + "]"
        if plain:
            return '["' + '","'.join(value) + '"]'
        return "[" + ",".join(map(_quote, value)) + "]"
    if kind is dict and all(type(key) is str for key in value):
        return "{" + ",".join([_quote(k) + ":" + _compact(v) for k, v in value.items()]) + "}"
    raise TypeError(kind)


def dumps(config: dict[str, Any], check_size: bool = True) -> str:
    """Compact JSON; refuses a value that no process could be started with."""
    try:
        text = _compact(config)
    except TypeError:  # floats, booleans, ...: not what build() makes
        import json

        text = json.dumps(config, separators=(",", ":"))
    if check_size and len(text) > MAX_VALUE:
        raise _too_large(f"{len(text)} bytes", text)
    return text


#: The fewest bytes one worker adds to TF_CONFIG: ``"h:1024",``.
MIN_WORKER = 9


def check_world(world_size: int, bound: int = 0) -> None:
    """Refuse, before building it, a TF_CONFIG that cannot fit one environment variable:
    whatever the host names (a world of 20 million ranks would otherwise cost gigabytes to
    build only to be refused by :func:`dumps`), or given ``bound``, the fewest bytes its
    worker list takes with these addresses (``Resolution.tf_config_bound``: 2,000 ranks whose
    addresses are 250 characters long are refused before 500 KB are built)."""
    if world_size * MIN_WORKER > MAX_VALUE:
        raise _too_large(f"at least {world_size * MIN_WORKER} bytes ({world_size} workers)", None)
    if bound > MAX_VALUE:
        raise _too_large(f"at least {bound} bytes ({world_size} workers)", None)


def _too_large(size: str, text: str | None) -> SlurmEnvError:
    return SlurmEnvError(
        f"TF_CONFIG would be {size}, over Linux's {MAX_ARG_STRLEN}-byte limit for "
        "one environment variable: every program started with it would fail",
        variable="TF_CONFIG", value=text,
        fix="build the resolver in Python instead (slurmenv.tf.cluster_resolver() or "
        "slurmenv.resolve().tf_config), or export without it: slurmenv export --for torch")


def cluster_roles(config: Mapping[str, Any]) -> list[tuple[str, int]]:
    """``(task type, index)`` of every task of a ``TF_CONFIG``'s cluster, in the order ranks
    are given to jobs (:data:`JOB_NAMES`: the chief, if any, is rank 0)."""
    cluster = config.get("cluster", {})
    return [(name, index) for name in JOB_NAMES for index in range(len(cluster.get(name, [])))]


def rank_addresses(config: Mapping[str, Any]) -> list[str]:
    """``host:port`` of every task of a ``TF_CONFIG``'s cluster, in the order of
    :func:`cluster_roles` (rank order, but for an evaluator, which the cluster leaves out):
    what ``Resolution.tf_addresses`` gives for a ``TF_CONFIG`` the launcher set."""
    cluster = config.get("cluster", {})
    return [str(cluster[name][index]) for name, index in cluster_roles(config)]


def port_of(address: str) -> int | None:
    """The port of ``host:port`` (None when there is none)."""
    _, colon, port = address.rpartition(":")
    return int(port) if colon and is_number(port) else None


def host_of(address: str) -> str:
    """The host of ``host:port`` (brackets of an IPv6 literal removed)."""
    host, colon, port = address.rpartition(":")
    if not colon or not is_number(port):
        host = address
    return host.strip("[]")
