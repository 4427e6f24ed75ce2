"""One task of a step: MultiWorkerMirroredStrategy from slurmenv.tf.cluster_resolver(), with
no TF_CONFIG variable; sums each worker's (rank + 1) across workers and prints JSON."""

import json
import os

os.environ.pop("TF_CONFIG", None)  # prove the resolver needs no variable

import tensorflow as tf
from tensorflow.python.eager import context

import slurmenv.tf

resolver = slurmenv.tf.cluster_resolver()
strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
mine = float(resolver.task_id + 1)
per_replica = strategy.run(lambda: tf.constant(mine))
total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
line = json.dumps({
    "task_type": resolver.task_type, "task_id": resolver.task_id,
    "workers": resolver.cluster_spec().as_dict().get("worker"),
    "replicas": strategy.num_replicas_in_sync, "sum": float(total.numpy()),
    "tf_config_set": "TF_CONFIG" in os.environ,
})
os.write(1, (line + "\n").encode())
# no worker exits while a peer may still read from it: every worker waits here (TensorFlow's
# coordination service, which MultiWorkerMirroredStrategy starts) before leaving
context.context().wait_at_barrier("fw_tf_mwms-end", 120_000)
