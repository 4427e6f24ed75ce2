"""The PMI client (slurmenv/launchers/pmi.py) against a tiny PMI-1 server in this process, over
a socketpair: hostile and silent servers end in a refusal naming PMI_FD within the bound, and
the slurm launcher's seam (SLURMENV_PMI=1) reads the layout from the answers. What Slurm's
own server does is proven on the real cluster (tests/test_real_pmi.py)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

import slurmenv
from slurmenv.errors import SlurmEnvError
from slurmenv.launchers import pmi

Reply = Callable[[str], "bytes | None"]


def slurm_like(kvs: dict[str, str], log: list[str]) -> Reply:
    """Answers as slurmstepd's pmi1.c does; ``kvs`` is the space after the fence."""

    def reply(line: str) -> bytes | None:
        log.append(line)
        fields = dict(word.partition("=")[::2] for word in line.split(" "))
        cmd = fields.get("cmd")
        if cmd == "init":
            return b"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"
        if cmd == "get_my_kvsname":
            return b"cmd=my_kvsname rc=0 kvsname=7.0\n"
        if cmd == "put":
            kvs.setdefault(fields["key"], fields["value"])
            return b"cmd=put_result rc=0\n"
        if cmd == "barrier_in":
            return b"cmd=barrier_out rc=0\n"
        if cmd == "get":
            value = kvs.get(fields["key"])
            return (f"cmd=get_result rc=0 value={value}\n" if value is not None
                    else "cmd=get_result rc=1\n").encode()
        return None  # the real server logs "invalid pmi1 command" and does not answer

    return reply


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    """Each test's socket is a new task (fd numbers are reused)."""
    pmi._TOLD.clear()
    yield
    pmi._TOLD.clear()


@pytest.fixture
def server() -> Iterator[Callable[[Reply], int]]:
    """``start(reply)``: a socketpair whose far end answers each request line with
    ``reply(line)`` (None: no answer); returns the near fd (this process's PMI_FD)."""
    sockets: list[socket.socket] = []

    def start(reply: Reply) -> int:
        near, far = socket.socketpair()
        sockets.extend((near, far))

        def serve() -> None:
            data = b""
            while True:
                try:
                    chunk = far.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                data += chunk
                while b"\n" in data:
                    line, _, data = data.partition(b"\n")
                    answer = reply(line.decode())
                    if answer:
                        try:
                            far.sendall(answer)
                        except OSError:
                            return

        threading.Thread(target=serve, daemon=True).start()
        return near.fileno()

    yield start
    for sock in sockets:
        sock.close()


def step(fd: int, **extra: str) -> dict[str, str]:
    """Rank 0 of a 2-node, 4-task block step on n1, n2 under srun --mpi=pmi2."""
    env = {
        "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-2]",
        "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0", "SLURM_GTIDS": "0,1", "SLURMD_NODENAME": "n1",
        "SLURM_DISTRIBUTION": "block", "PMI_FD": str(fd), "PMI_RANK": "0", "PMI_SIZE": "4",
        "SLURMENV_PMI": "1", "SLURMENV_PMI_TIMEOUT": "2",
    }
    env.update(extra)
    return env


def resolve(env: dict[str, str]) -> slurmenv.Resolution:
    return slurmenv.resolve(env, ephemeral_range=None, cpus=1, step_evidence=None, rivals=None)


def test_block_step_read_through_pmi_agrees_and_says_so(server: Callable[[Reply], int]) -> None:
    log: list[str] = []
    fd = server(slurm_like({"slurmenv-node-1": "n2/2-3"}, log))
    res = resolve(step(fd))
    assert (res.rank, res.world_size, res.master_addr) == (0, 4, "n1")
    assert list(res.node_of) == [0, 0, 1, 1]
    assert any("agrees with what Slurm's PMI" in note for note in res.notes)
    assert "read from Slurm's PMI" in (res.layout_name or "")
    # O(nodes) requests, never finalize; the fd stays open for what runs next
    assert [line.split()[0] for line in log] == [
        "cmd=init", "cmd=get_my_kvsname", "cmd=put", "cmd=barrier_in", "cmd=get", "cmd=get"]
    assert "cmd=put kvsname=7.0 key=slurmenv-node-0 value=n1/0-1" in log
    os.fstat(fd)


def test_a_process_asks_once(server: Callable[[Reply], int]) -> None:
    """Slurm answers one init per task: a second resolution in the process reuses the answer."""
    log: list[str] = []
    fd = server(slurm_like({"slurmenv-node-1": "n2/2-3"}, log))
    first, again = resolve(step(fd)), resolve(step(fd))
    assert first.master_addr == again.master_addr == "n1"
    assert sum(line.startswith("cmd=init") for line in log) == 1


def test_only_the_lowest_rank_of_a_node_puts(server: Callable[[Reply], int]) -> None:
    log: list[str] = []
    fd = server(slurm_like({"slurmenv-node-0": "n1/0-1", "slurmenv-node-1": "n2/2-3"}, log))
    res = resolve(step(fd, SLURM_PROCID="3", PMI_RANK="3", SLURM_LOCALID="1", SLURM_NODEID="1",
                       SLURM_GTIDS="2,3", SLURMD_NODENAME="n2"))
    assert res.rank == 3 and res.master_addr == "n1"
    assert not any(line.startswith("cmd=put") for line in log)


def test_a_derivation_that_disagrees_is_refused_naming_both(
        server: Callable[[Reply], int]) -> None:
    # Slurm told cyclic placement, SLURM_DISTRIBUTION says block: rank 1 is on n2
    fd = server(slurm_like({"slurmenv-node-1": "n2/1,3"}, []))
    with pytest.raises(SlurmEnvError) as err:
        resolve(step(fd, SLURM_GTIDS="0,2"))
    assert "Slurm's PMI says rank 1 runs on n2" in err.value.message
    assert "block layout" in err.value.message and "puts it on n1" in err.value.message


def test_the_step_is_used_where_the_files_cannot_tell(
        server: Callable[[Reply], int], tmp_path: os.PathLike[str]) -> None:
    conf = os.path.join(str(tmp_path), "slurm.conf")
    with open(conf, "w") as f:
        f.write("TopologyPlugin=topology/tree\n")
    with open(os.path.join(str(tmp_path), "topology.yaml"), "w") as f:
        f.write("- topology: x\n")
    base = step(0, SLURM_JOB_SLUID="s1", SLURM_CONF=conf, SLURM_DISTRIBUTION="",
                SLURMENV_PMI="0")
    with pytest.raises(SlurmEnvError) as err:
        resolve(base)
    assert "srun --mpi=pmi2 with SLURMENV_PMI=1" in (err.value.fix or "")
    # n2 first in topology order: rank 0 runs on n2
    fd = server(slurm_like({"slurmenv-node-0": "n1/2-3", "slurmenv-node-1": "n2/0-1"}, []))
    res = resolve({**base, "PMI_FD": str(fd), "SLURMENV_PMI": "1", "SLURM_PROCID": "2",
                   "PMI_RANK": "2", "SLURM_GTIDS": "2,3"})
    assert res.rank == 2 and res.master_addr == "n2" and res.node_rank == 0
    assert any("cannot tell it" in note and "topology.yaml" in note for note in res.notes)


def test_the_option_turns_it_on_and_off(server: Callable[[Reply], int]) -> None:
    fd = server(lambda line: None)  # would hang: never asked when off
    assert resolve(step(fd, SLURMENV_PMI="0")).master_addr == "n1"
    assert slurmenv.resolve(step(fd, SLURMENV_PMI=""), pmi=False, ephemeral_range=None, cpus=1,
                            step_evidence=None, rivals=None).rank == 0
    log: list[str] = []
    fd = server(slurm_like({"slurmenv-node-1": "n2/2-3"}, log))
    slurmenv.resolve(step(fd, SLURMENV_PMI=""), pmi=True, ephemeral_range=None, cpus=1,
                     step_evidence=None, rivals=None)
    assert log
    one_node = step(fd, SLURM_STEP_NODELIST="n1", SLURM_STEP_NUM_NODES="1",
                    SLURM_STEP_TASKS_PER_NODE="4", SLURM_GTIDS="0,1,2,3")
    log.clear()
    assert resolve(one_node).master_addr == "n1" and not log  # one node: nothing to ask


def test_on_without_pmi_is_refused() -> None:
    env = step(0)
    del env["PMI_FD"], env["PMI_SIZE"], env["PMI_RANK"]
    with pytest.raises(SlurmEnvError) as err:
        resolve(env)
    assert err.value.variable == "PMI_FD" and "srun --mpi=pmi2" in (err.value.fix or "")


def test_a_silent_server_is_refused_within_the_bound(server: Callable[[Reply], int]) -> None:
    def no_fence(line: str) -> bytes | None:
        return None if line.startswith("cmd=barrier_in") else slurm_like({}, [])(line)

    fd = server(no_fence)
    with pytest.raises(SlurmEnvError) as err:  # a hang would never end (the real bound:
        resolve(step(fd, SLURMENV_PMI_TIMEOUT="0.5"))  # tests/test_real_pmi.py)
    assert err.value.variable == "PMI_FD"
    assert "within 0.5 s" in err.value.message and "not every task" in err.value.message


@pytest.mark.parametrize(("answer", "said"), [
    (b"x" * (pmi.MAX_LINE + 10), "longer than"),
    (b"cmd=response_to_init rc=1 pmi_version=2 pmi_subversion=0\n", "not cmd=response_to_init"),
    (b"cmd=barrier_out rc=0\n", "not cmd=response_to_init"),
    (b"", "closed the socket"),
])
def test_hostile_replies_are_refused(server: Callable[[Reply], int], answer: bytes,
                                     said: str) -> None:
    near, far = socket.socketpair()
    try:
        if answer:
            far.sendall(answer)
        else:
            far.shutdown(socket.SHUT_WR)  # the server ends its side, as finalize does
        with pytest.raises(SlurmEnvError) as err:
            resolve(step(near.fileno()))
        assert said in err.value.message and err.value.variable == "PMI_FD"
    finally:
        near.close()
        far.close()


@pytest.mark.parametrize("entry", ["n2", "n2/3-2", "n2/a", "n3/2-3", "n2/2-3,3", "n2/0-99999999"])
def test_a_bad_entry_is_refused(server: Callable[[Reply], int], entry: str) -> None:
    fd = server(slurm_like({"slurmenv-node-1": entry}, []))
    with pytest.raises(SlurmEnvError) as err:
        resolve(step(fd))
    assert err.value.variable == "PMI_FD"


def test_a_closed_socket_is_refused() -> None:
    near, far = socket.socketpair()
    far.close()
    try:
        with pytest.raises(SlurmEnvError, match="cannot send 'cmd=init'"):
            resolve(step(near.fileno()))
    finally:
        near.close()


def test_not_a_socket_and_bad_timeouts_are_refused() -> None:
    read, write = os.pipe()
    try:
        with pytest.raises(SlurmEnvError, match="not an open socket"):
            resolve(step(read))
    finally:
        os.close(read)
        os.close(write)
    for fd in (2**31, 10**19 - 1):  # past a C int: no fd of this process, never a traceback
        with pytest.raises(SlurmEnvError, match="not an open socket"):
            resolve(step(fd))
    for text in ("0", "-1", "x", "1e9", "nan"):
        with pytest.raises(SlurmEnvError) as err:
            pmi.timeout({"SLURMENV_PMI_TIMEOUT": text})
        assert err.value.variable == "SLURMENV_PMI_TIMEOUT"
    assert pmi.timeout({}) == pmi.DEFAULT_TIMEOUT


def test_ranges_round_trip() -> None:
    for ranks in ([0], [0, 1, 2, 3], [0, 2, 4], [1, 2, 3, 7, 8, 10]):
        assert pmi.unranges(pmi.ranges(ranks), 100) == ranks
    assert pmi.ranges([0, 1, 2, 3, 8]) == "0-3,8"
