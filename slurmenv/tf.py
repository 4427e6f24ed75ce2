"""TensorFlow helper: a cluster resolver built in-process from the Slurm step (TF optional).

>>> import slurmenv.tf, tensorflow as tf
>>> strategy = tf.distribute.MultiWorkerMirroredStrategy(
...     cluster_resolver=slurmenv.tf.cluster_resolver())

No ``TF_CONFIG`` variable is involved, so there is no size limit: Linux refuses to start any
program with one environment string over 128 KiB, which a ``TF_CONFIG`` of a few thousand
workers exceeds. tensorflow is imported only when the function is called.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from .resolution import Resolution


@functools.cache
def _resolver_class() -> Any:
    """``SlurmClusterResolver``: a TFConfigClusterResolver fed from a dict, not ``TF_CONFIG``
    (not a SimpleClusterResolver, which would report no local GPU to the strategy)."""
    import tensorflow as tf

    base = tf.distribute.cluster_resolver.TFConfigClusterResolver

    class SlurmClusterResolver(base):  # type: ignore[misc, valid-type]
        """TensorFlow's view of a Slurm step, built by slurmenv (no ``TF_CONFIG`` read)."""

        def __init__(self, config: dict[str, Any], rpc_layer: str = "grpc") -> None:
            task = config["task"]
            super().__init__(task_type=task["type"], task_id=int(task["index"]),
                             rpc_layer=rpc_layer)
            self._slurmenv_cluster = {k: list(v) for k, v in config["cluster"].items()}

        def cluster_spec(self) -> Any:
            return tf.train.ClusterSpec(self._slurmenv_cluster)

        def master(self, task_type: str | None = None, task_id: int | None = None,
                   rpc_layer: str | None = None) -> str:
            spec = self.cluster_spec()
            jobs = spec.jobs
            if not jobs or (len(jobs) == 1 and len(spec.job_tasks(jobs[0])) == 1):
                return ""
            task_type = self.task_type if task_type is None else task_type
            if task_type not in jobs:  # the evaluator: no server, not in the cluster
                return ""
            address = spec.task_address(task_type, self.task_id if task_id is None else task_id)
            layer = self.rpc_layer if rpc_layer is None else rpc_layer
            return f"{layer}://{address}" if layer else str(address)

    return SlurmClusterResolver


def cluster_resolver(resolution: Resolution | None = None, *,
                     environ: Mapping[str, str] | None = None, rpc_layer: str = "grpc",
                     jobs: Mapping[str, int] | str | None = None) -> Any:
    """A ``tf.distribute.cluster_resolver`` for this task of the step: a
    ``TFConfigClusterResolver`` fed from ``resolution.tf_config`` (``slurmenv.resolve(environ)``
    unless given), never the ``TF_CONFIG`` variable. ``SLURMENV_TF_CHIEF=1`` makes rank 0 the
    chief; ``jobs`` (``{"chief": 1, "ps": 2, "worker": 4}`` as TensorFlow's
    ``SlurmClusterResolver`` takes it, or ``"chief=1,ps=2,worker=4"``; ``SLURMENV_TF_JOBS``)
    gives the ranks roles, in slices in the order chief, evaluator, ps, worker. SlurmEnvError
    when the step cannot be resolved or the jobs do not fit it."""
    from . import resolve

    if jobs is not None and resolution is not None:
        raise TypeError("give jobs to slurmenv.resolve(tf_jobs=...), not with a resolution")
    if jobs is not None and not isinstance(jobs, str):
        jobs = ",".join(f"{name}={count}" for name, count in dict(jobs).items())
    res = resolution if resolution is not None else resolve(environ, tf_jobs=jobs)
    return _resolver_class()(res.tf_config, rpc_layer=rpc_layer)


#: How often :func:`serve` looks whether the chief still listens, in seconds.
POLL_SECONDS = 1.0


def serve(resolver: Any = None, *, start_timeout: float = 600.0,
          poll: float = POLL_SECONDS) -> None:
    """Run this task's ``tf.distribute.Server`` (a ``ps`` or ``worker`` of
    ``ParameterServerStrategy``) until the chief is done, then return (``Server.join()`` never
    returns, so such a step never ended): while the chief's address accepts TCP connections,
    until it refuses two in a row once it has accepted one; the step's status is then the
    chief's. TimeoutError when the chief never listens within ``start_timeout`` seconds."""
    import socket
    import time

    import tensorflow as tf

    if resolver is None:
        resolver = cluster_resolver()
    spec = resolver.cluster_spec()
    if "chief" not in spec.jobs:
        raise ValueError("serve() needs a chief in the cluster (--tf-jobs chief=1,ps=...)")
    server = tf.distribute.Server(spec, job_name=resolver.task_type, task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    host, _, port = str(spec.task_address("chief", 0)).rpartition(":")
    chief = (host.strip("[]"), int(port))
    deadline = time.monotonic() + start_timeout
    seen, misses = False, 0
    while True:
        try:
            with socket.create_connection(chief, timeout=max(poll, 0.1)):
                seen, misses = True, 0
        except OSError:
            if seen:
                misses += 1
                if misses >= 2:
                    break
            elif time.monotonic() > deadline:
                raise TimeoutError(
                    f"the chief at {host}:{port} did not listen within {start_timeout:g} s"
                ) from None
        time.sleep(poll)
    del server
