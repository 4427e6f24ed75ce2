"""One task of a step: TensorFlow MultiWorkerMirroredStrategy from slurmenv's TF_CONFIG.

Every worker all-reduces ``task index + 1`` across the cluster; the sum is ``n(n+1)/2`` only
if all ``n`` workers joined. Prints one line ``CHECK {json}``; exits 1 if the sum is wrong.
"""

import json
import os
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # one log line less

import tensorflow as tf
from tensorflow.python.eager import context

config = json.loads(os.environ["TF_CONFIG"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = config["task"]["index"]


@tf.function
def step() -> tf.Tensor:
    ctx = tf.distribute.get_replica_context()
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(index + 1, tf.int64))


result = strategy.experimental_local_results(strategy.run(step))[0]
workers = len(config["cluster"]["worker"])
expected = workers * (workers + 1) // 2
line = "CHECK " + json.dumps({
    "index": index, "replicas": strategy.num_replicas_in_sync, "host": socket.gethostname(),
    "sum": int(result.numpy()), "expected": expected, "tf_config": config,
})
os.write(1, (line + "\n").encode())
# no worker exits while a peer may still read from it: every worker waits here (TensorFlow's
# coordination service, which MultiWorkerMirroredStrategy starts) before leaving
context.context().wait_at_barrier("check_tf-end", 120_000)
raise SystemExit(0 if int(result.numpy()) == expected else 1)
