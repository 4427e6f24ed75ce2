"""One task of a ParameterServerStrategy step, roles from slurmenv (``--tf-jobs
chief=1,ps=P,worker=W``, read by ``slurmenv.tf.cluster_resolver()``; no TF_CONFIG).

ps and worker tasks run their ``tf.distribute.Server`` through ``slurmenv.tf.serve()``, which
returns once the chief is done; the chief runs a ClusterCoordinator that trains a linear model
on random data (variables on the ps tasks, steps on the workers) and prints its loss before and
after. Every task prints one JSON line: its role, host, and (chief) the losses.
"""

import json
import os
import socket
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.pop("TF_CONFIG", None)  # prove the resolver needs no variable

import tensorflow as tf

import slurmenv.tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)
STEPS = int(os.environ.get("STEPS", "20"))

resolver = slurmenv.tf.cluster_resolver()
spec = resolver.cluster_spec().as_dict()
out = {"task_type": resolver.task_type, "task_id": resolver.task_id, "host": socket.gethostname(),
       "cluster": spec, "rank": int(os.environ["SLURM_PROCID"])}

if resolver.task_type in ("ps", "worker"):
    start = time.monotonic()
    slurmenv.tf.serve(resolver)
    out["served_seconds"] = round(time.monotonic() - start, 1)
    out["ended_at"] = time.time()  # the nodes share this machine's clock
    os.write(1, (json.dumps(out) + "\n").encode())
    sys.exit(0)

strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
true_w = tf.constant([[1.0], [2.0], [-1.0], [0.5]])
with strategy.scope():
    w = tf.Variable(tf.zeros([4, 1]), name="w")
    b = tf.Variable(0.0, name="b")


def loss_of(x: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean((tf.matmul(x, w) + b - (tf.matmul(x, true_w) + 0.3)) ** 2)


@tf.function
def train_step() -> tf.Tensor:
    def replica() -> tf.Tensor:
        x = tf.random.normal([32, 4])
        with tf.GradientTape() as tape:
            loss = loss_of(x)
        grad_w, grad_b = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * grad_w)
        b.assign_sub(0.1 * grad_b)
        return loss

    return strategy.run(replica)


held_out = tf.random.stateless_normal([256, 4], seed=[1, 2])
out["loss_before"] = float(loss_of(held_out))
results = [coordinator.schedule(train_step) for _ in range(STEPS)]
coordinator.join()
out["step_losses"] = [round(float(r.fetch()), 4) for r in results]
out["loss_after"] = float(loss_of(held_out))
out["devices"] = {"w": w.device, "b": b.device}
out["ended_at"] = time.time()
os.write(1, (json.dumps(out) + "\n").encode())
