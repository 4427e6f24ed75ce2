"""One task of a MultiWorkerMirroredStrategy step with a chief (``--tf-jobs chief=1,worker=N``).

Each task builds two resolvers: slurmenv's (``slurmenv.tf.cluster_resolver()``, jobs from
``SLURMENV_TF_JOBS``) and TensorFlow's own ``SlurmClusterResolver(jobs=...)`` (CPU nodes:
it needs ``gpus_per_node``, else it runs ``nvidia-smi``), and trains a linear model on random
data with the one named by ``RESOLVER`` (``slurmenv`` or ``tensorflow``). Prints one JSON line:
both resolvers' cluster and task, the host, and the loss before and after training.
"""

import json
import os
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.pop("TF_CONFIG", None)  # prove the resolver needs no variable

import tensorflow as tf
from tensorflow.python.eager import context

import slurmenv.tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)

ours = slurmenv.tf.cluster_resolver()
jobs = {name: int(count) for name, _, count in
        (item.partition("=") for item in os.environ["SLURMENV_TF_JOBS"].split(","))}
theirs = tf.distribute.cluster_resolver.SlurmClusterResolver(
    jobs=jobs, port_base=int(os.environ.get("PORT_BASE", "8888")), gpus_per_node=8,
    gpus_per_task=1, auto_set_gpu=False,
)
out = {
    "rank": int(os.environ["SLURM_PROCID"]), "host": socket.gethostname(),
    "ours": {"cluster": ours.cluster_spec().as_dict(), "task": [ours.task_type, ours.task_id]},
    "theirs": {"cluster": theirs.cluster_spec().as_dict(), "task": list(theirs.get_task_info())},
}
resolver = ours if os.environ.get("RESOLVER", "slurmenv") == "slurmenv" else theirs
out["resolver"] = type(resolver).__module__
strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
true_w = tf.constant([[1.0], [2.0], [-1.0], [0.5]])
with strategy.scope():
    mean = tf.VariableAggregation.MEAN
    w = tf.Variable(tf.zeros([4, 1]), aggregation=mean)
    b = tf.Variable(0.0, aggregation=mean)


def loss_of(x: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean((tf.matmul(x, w) + b - (tf.matmul(x, true_w) + 0.3)) ** 2)


@tf.function
def train_step(seed: tf.Tensor) -> tf.Tensor:
    def replica() -> tf.Tensor:
        ctx = tf.distribute.get_replica_context()
        x = tf.random.stateless_normal([32, 4], seed=[seed, out["rank"]])
        with tf.GradientTape() as tape:
            loss = loss_of(x)
        grads = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, tape.gradient(loss, [w, b]))
        w.assign_sub(0.1 * grads[0])
        b.assign_sub(0.1 * grads[1])
        return ctx.all_reduce(tf.distribute.ReduceOp.MEAN, loss)

    return strategy.experimental_local_results(strategy.run(replica))[0]


held_out = tf.random.stateless_normal([256, 4], seed=[1, 2])
out["loss_before"] = float(loss_of(held_out))
out["step_losses"] = [round(float(train_step(tf.constant(i))), 4) for i in range(int(
    os.environ.get("STEPS", "20")))]
out["loss_after"] = float(loss_of(held_out))
out["replicas"] = strategy.num_replicas_in_sync
os.write(1, (json.dumps(out) + "\n").encode())
# no worker exits while a peer may still read from it: every worker waits here (TensorFlow's
# coordination service, which MultiWorkerMirroredStrategy starts) before leaving
context.context().wait_at_barrier("fw_tf_chief-end", 120_000)
