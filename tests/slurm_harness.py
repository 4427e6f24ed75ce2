"""Start a real multi-node Slurm cluster on this one machine, for tests.

Every node is a network namespace of its own running one ``slurmd``; ``slurmctld``
runs in a controller namespace that also holds a bridge with a veth pair to each
node.  The subnet exists only inside those namespaces, so nothing ever talks to the
outside network, and several clusters (several test runs) can live side by side:
every namespace name carries a prefix made of this process's PID and a counter
(``se<pid>x<n>``).  Interface names live inside the namespaces and need no prefix.

Each daemon, and each command run through :meth:`SlurmCluster.run`, gets its own UTS
and mount namespace (``unshare``) where the hostname is the node's name and
``/etc/hosts`` is bind-mounted from a file listing the cluster's addresses.
``nsenter`` is used rather than ``ip netns exec``: the latter remounts ``/sys`` and
slurmd then dies ("No filesystem mounted on /sys/fs/cgroup").

Slurm runs without munge (``AuthType=auth/none``) as root, so this needs root.

``release=None`` runs Debian's Slurm (22.05, from ``apt-get``); ``release="26.05.3"`` runs that
release as built by ``tests/build_slurm.sh`` under :data:`SLURM_PREFIX` (``PATH`` and
``LD_LIBRARY_PATH`` of the daemons and of every command point there, so tasks see the same
release). ``topology`` is the text of a ``topology.conf`` written beside ``slurm.conf``; pass the
plugin line (``TopologyPlugin=topology/tree``) in ``extra_conf``.
Typical use::

    with SlurmCluster() as cluster:
        res = cluster.srun(["-N4", "-n8"], ["hostname"])
        assert res.per_task[0] == ["r1n09"]
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# two bracket groups, zero padding, crossing a digit boundary: r1n[09-10],r2n[09-10]
DEFAULT_NODES = ("r1n09", "r1n10", "r2n09", "r2n10")
CONTROLLER = "slurmctl"  # hostname of the controller inside its namespace
SUBNET = "10.213.0"  # a /24 that exists only inside each cluster's own namespaces
SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client")
SLURM_BINARIES = ("slurmctld", "slurmd", "srun")
_ENV_DROP = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")  # never leak into our commands
_OURS = re.compile(r"^se(\d+)x(\d+)(c|n\d+)$")  # the namespace names we create
_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")  # srun --label prefix, space-padded
# where tests/build_slurm.sh installs each release (one folder a version)
SLURM_PREFIX = Path(os.environ.get("SLURMENV_SLURM_PREFIX", "/opt/slurmenv-slurm"))
_counter = itertools.count()
_live: set[SlurmCluster] = set()  # started, not yet stopped (for the SIGTERM handler)


class SlurmUnavailable(RuntimeError):
    """This machine cannot host a cluster: not root, tools missing, no netns."""


class SlurmStartError(RuntimeError):
    """The daemons did not come up; the message carries the tails of their logs."""


@dataclass
class SrunResult:
    """Output of ``srun --label``; ``per_task`` maps rank -> that task's lines."""

    returncode: int
    stdout: str
    stderr: str
    per_task: dict[int, list[str]] = field(default_factory=dict)

    @property
    def per_task_first(self) -> dict[int, str]:
        """Rank -> first output line of that task."""
        return {rank: lines[0] for rank, lines in self.per_task.items() if lines}

    def per_task_env(self) -> dict[int, dict[str, str]]:
        """Rank -> that task's ``KEY=VALUE`` lines as a dict (e.g. from ``env``)."""
        return {
            rank: dict(line.split("=", 1) for line in lines if "=" in line)
            for rank, lines in self.per_task.items()
        }


@dataclass
class BatchResult:
    """A finished batch job: exit code and the content of its output files."""

    job_id: int
    returncode: int  # negative: killed by that signal
    stdout: str
    stderr: str


def parse_labels(text: str) -> dict[int, list[str]]:
    """Split ``srun --label`` output (``"N: line"``) into rank -> lines."""
    per_task: dict[int, list[str]] = {}
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            per_task.setdefault(int(m.group(1)), []).append(m.group(2))
    return dict(sorted(per_task.items()))


def release_dir(release: str) -> Path:
    """Where tests/build_slurm.sh installed Slurm ``release``."""
    return SLURM_PREFIX / release


def release_built(release: str) -> bool:
    """Whether Slurm ``release`` was built here (tests/build_slurm.sh's stamp)."""
    return (release_dir(release) / ".built").is_file()


def release_version(release: str | None) -> tuple[int, ...]:
    """``"26.05.3"`` -> (26, 5, 3); Debian's (``None``) is 22.05."""
    return tuple(int(part) for part in (release or "22.05.8").split("."))


def _release_path(release: str | None, path: str) -> str:
    if release is None:
        return path
    d = release_dir(release)
    return os.pathsep.join([str(d / "sbin"), str(d / "bin"), path])


def check_host_support(release: str | None = None) -> None:
    """Raise :class:`SlurmUnavailable` if this machine cannot run a cluster."""
    if os.geteuid() != 0:
        raise SlurmUnavailable("a real Slurm cluster needs root (netns, auth/none)")
    if release is not None and not release_built(release):
        raise SlurmUnavailable(f"Slurm {release} is not built in {release_dir(release)} "
                               f"(sh tests/build_slurm.sh {release}; tests/run.sh does it when "
                               "../shared/slurm-src has its source)")
    search = _release_path(release, os.environ.get("PATH", "/usr/bin:/bin"))
    tools = ("ip", "nsenter", "unshare", "mknod", "mount", "slurmctld", "slurmd", "srun")
    missing = [t for t in tools if shutil.which(t, path=search) is None]
    if missing:
        raise SlurmUnavailable(f"missing tools: {', '.join(missing)}")


def ensure_slurm_installed() -> None:
    """Install Slurm (and iproute2) with apt-get if missing: CI starts bare, as root."""
    packages = [*SLURM_PACKAGES] if not all(map(shutil.which, SLURM_BINARIES)) else []
    packages += ["iproute2"] if shutil.which("ip") is None else []
    if not packages or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return  # nothing to do, or nothing we can do: check_host_support() says why
    subprocess.run(
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        + " ".join(packages),
        shell=True,
        check=True,
    )


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _netns_list() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_netns(ns: str) -> None:
    """SIGKILL every process still in namespace ``ns``, then delete it."""
    for pid in _ip("netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    _ip("netns", "del", ns, check=False)


def _is_leftover(ns: str, own_prefix: str) -> bool:
    """Whether ``ns`` is one of our names, left by a run that no longer exists."""
    m = _OURS.match(ns)
    if not m:
        return False  # not ours: never touch
    if ns == own_prefix + m.group(3):
        return True  # our own name: a dead run whose PID was recycled to us
    pid = int(m.group(1))
    if pid == os.getpid():
        return False  # another cluster of this process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True  # its owner is gone
    except PermissionError:
        pass
    return False


def _stop_all_on_sigterm() -> None:
    """On SIGTERM (CI cancelling a run) stop our clusters, then die of SIGTERM.

    atexit does not run when a signal kills the process.  Installed only if no one
    else handles SIGTERM, and only from the main thread (where handlers live).
    """
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, _frame: object) -> None:
        for cluster in list(_live):
            cluster.stop()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, handler)


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<{exc}>"


class SlurmCluster:
    """One slurmctld plus one slurmd per node, each in its own network namespace."""

    def __init__(
        self,
        nodes: Sequence[str] = DEFAULT_NODES,
        cpus_per_node: int = 8,
        gpus_per_node: int = 0,
        start_timeout: float = 60.0,
        extra_conf: str = "",
        release: str | None = None,
        topology: str | None = None,
        files: Mapping[str, str] | None = None,
        conf_edit: Callable[[str], str] | None = None,
        munge_plugins: Path | None = None,
        dynamic: Sequence[str] | None = None,
        dynamic_conf: Mapping[str, str] | None = None,
    ) -> None:
        if not 0 < len(nodes) <= 250:  # addresses .2 to .251
            raise ValueError("between 1 and 250 nodes fit the /24 subnet")
        self.nodes = list(nodes)
        self.cpus_per_node = cpus_per_node
        self.gpus_per_node = gpus_per_node
        self.start_timeout = start_timeout
        self.extra_conf = extra_conf  # slurm.conf lines, e.g. "TaskProlog=/path"
        self.release = release  # None: Debian's 22.05; else a version built under SLURM_PREFIX
        self.topology = topology  # topology.conf's text, or None for no file
        self.files = dict(files or {})  # more files beside slurm.conf: name -> text
        self.conf_edit = conf_edit  # rewrites slurm.conf's whole text, or None
        self._written: list[Path] = []  # files written for this configuration
        # auth/munge and cred/munge (plugins built for this release in this folder, see
        # tests/build_munge_plugins.sh), one munged a host: needed by dynamic nodes, whose
        # addresses travel in a "net credential" that cred/none cannot make
        self.munge_plugins = munge_plugins
        # these nodes register as dynamic nodes (slurmd -Z), one after the other in this order
        self.dynamic = list(dynamic or [])
        self.dynamic_conf = dict(dynamic_conf or {})  # node -> more --conf words (Topology=...)
        self.prefix = f"se{os.getpid()}x{next(_counter)}"
        self.ctl_ns = f"{self.prefix}c"
        self.node_ns = {node: f"{self.prefix}n{i}" for i, node in enumerate(nodes)}
        self.addr = {CONTROLLER: f"{SUBNET}.1"}
        self.addr.update({node: f"{SUBNET}.{i + 2}" for i, node in enumerate(nodes)})
        self.tmp: Path | None = None  # set while running
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.start_seconds = 0.0  # how long start() took

    def _dir(self, *parts: str) -> Path:
        if self.tmp is None:
            raise RuntimeError("the cluster is not running")
        return self.tmp.joinpath(*parts)

    @property
    def conf(self) -> Path:
        """slurm.conf (``SLURM_CONF`` of every command run through :meth:`run`)."""
        return self._dir("etc", "slurm.conf")

    @property
    def hosts(self) -> Path:
        """The hosts file bind-mounted on ``/etc/hosts`` for daemons and commands."""
        return self._dir("etc", "hosts")

    @property
    def log_dir(self) -> Path:
        return self._dir("log")

    # -- lifecycle ------------------------------------------------------------------
    def __enter__(self) -> SlurmCluster:  # noqa: PYI034 - no typing.Self before 3.11
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> SlurmCluster:
        """Create namespaces and config, start the daemons, wait for idle nodes."""
        if self.tmp is not None:
            return self  # already running
        if self.release is None:
            ensure_slurm_installed()
        check_host_support(self.release)
        t0 = time.monotonic()
        self._remove_leftovers()
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        atexit.register(self.stop)  # safety nets in case the caller never stops us
        _live.add(self)
        _stop_all_on_sigterm()
        try:
            self._make_network()
            self._write_files()
            self._start_daemons()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _start_daemons(self) -> None:
        conf = str(self.conf)
        if self.munge_plugins is not None:
            for host in [CONTROLLER, *self.nodes]:  # one munged a host: each decodes a
                sock = self._dir("munge", host)  # credential once (replays are refused)
                self._spawn(f"munged-{host}", self.ctl_ns, CONTROLLER, [
                    "munged", "-F", "--force", f"--socket={sock}/munge.socket",
                    f"--key-file={self._dir('munge', 'munge.key')}",
                    f"--pid-file={sock}/munged.pid", f"--log-file={sock}/munged.log",
                    f"--seed-file={sock}/seed"])
            self._wait_for(lambda: all(self._dir("munge", h, "munge.socket").exists()
                                       for h in [CONTROLLER, *self.nodes]), "munged")
        ctld = ["slurmctld", "-D", "-i", "-f", conf]
        self._spawn("slurmctld", self.ctl_ns, CONTROLLER, ctld)
        for node, ns in self.node_ns.items():
            if node not in self.dynamic:
                self._spawn(f"slurmd-{node}", ns, node, ["slurmd", "-D", "-N", node, "-f", conf])
        n = self.cpus_per_node
        for node in self.dynamic:  # registered in this order: each waits for the one before
            words = (f"NodeAddr={self.addr[node]} CPUs={n} Boards=1 SocketsPerBoard=1 "
                     f"CoresPerSocket={n} ThreadsPerCore=1 RealMemory=2000 "
                     f"{self.dynamic_conf.get(node, '')}").strip()
            self._spawn(f"slurmd-{node}", self.node_ns[node], node,
                        ["slurmd", "-D", "-N", node, "-f", conf, "-Z", "--conf", words])
            self._wait_for(lambda node=node: node in self._node_states(), f"{node} to register")
        self._wait_idle()

    def _node_states(self) -> dict[str, str]:
        try:  # sinfo waits for a controller that is gone: the caller checks the daemons again
            res = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=5)
        except subprocess.TimeoutExpired:
            return {}
        lines = res.stdout.strip().splitlines() if res.returncode == 0 else []
        return dict(line.split() for line in lines if line.strip())

    def _wait_for(self, ready: Callable[[], bool], what: str | Callable[[], str]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            dead = [name for name, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise SlurmStartError(f"daemon(s) exited: {dead}\n{self.logs()}")
            if time.monotonic() > deadline:
                said = what if isinstance(what, str) else what()
                raise SlurmStartError(f"waited {self.start_timeout}s for {said}\n{self.logs()}")
            time.sleep(0.2)

    def reconfigure(
        self,
        extra_conf: str = "",
        topology: str | None = None,
        files: Mapping[str, str] | None = None,
        conf_edit: Callable[[str], str] | None = None,
    ) -> SlurmCluster:
        """Restart the daemons of this running cluster on new configuration files (as the
        constructor takes them), with empty state, logs and spool: a fresh cluster on the same
        namespaces, without their cost. :class:`SlurmStartError` (with the daemons' logs) if
        they do not come up; the cluster can then be reconfigured again. ``start_seconds`` is
        how long the restart took."""
        if self.tmp is None:
            raise RuntimeError("the cluster is not running: start() it first")
        t0 = time.monotonic()
        self._stop_daemons()
        for ns in self.node_ns.values():  # slurmstepd and tasks of the previous configuration
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for d in ("state", "log", "spool"):
            shutil.rmtree(self._dir(d), ignore_errors=True)
        for path in self._written:
            path.unlink(missing_ok=True)
        self.extra_conf, self.topology = extra_conf, topology
        self.files, self.conf_edit = dict(files or {}), conf_edit
        self._write_files()
        self._start_daemons()
        self.start_seconds = time.monotonic() - t0
        return self

    def _stop_daemons(self) -> None:
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # each daemon leads its own group
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        self.procs.clear()

    def stop(self) -> None:
        """Kill the daemons and all else in our namespaces; delete everything."""
        self._stop_daemons()
        # slurmstepd, tasks and stray srun calls also live in our namespaces
        existing = _netns_list()
        for ns in [*self.node_ns.values(), self.ctl_ns]:
            if ns in existing:
                _kill_netns(ns)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        atexit.unregister(self.stop)
        _live.discard(self)

    def _remove_leftovers(self) -> None:
        """Delete namespaces and temp dirs of crashed runs (owner PID dead, or a
        recycled PID giving our own prefix)."""
        for ns in _netns_list():
            if _is_leftover(ns, self.prefix):
                _kill_netns(ns)
        for d in Path(tempfile.gettempdir()).glob("se*x*-*"):
            if d.is_dir() and _is_leftover(d.name.split("-")[0] + "c", self.prefix):
                shutil.rmtree(d, ignore_errors=True)

    def _make_network(self) -> None:
        """Bridge br0 in the controller netns; eth0 in each node netns, veth to br0."""
        try:
            _ip("netns", "add", self.ctl_ns)
        except subprocess.CalledProcessError as exc:
            msg = f"cannot create a network namespace: {exc.stderr.strip()}"
            raise SlurmUnavailable(msg) from exc
        c = ("-n", self.ctl_ns)
        _ip(*c, "link", "set", "lo", "up")
        _ip(*c, "link", "add", "br0", "type", "bridge")
        _ip(*c, "addr", "add", f"{self.addr[CONTROLLER]}/24", "dev", "br0")
        _ip(*c, "link", "set", "br0", "up")
        for i, (node, ns) in enumerate(self.node_ns.items()):
            _ip("netns", "add", ns)
            # the veth is created in the controller netns, its peer moved to the node's
            veth = f"v{i}"
            peer = ("peer", "name", "eth0", "netns", ns)
            _ip(*c, "link", "add", veth, "type", "veth", *peer)
            _ip(*c, "link", "set", veth, "master", "br0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{self.addr[node]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def _write_files(self) -> None:
        """slurm.conf, gres.conf, the hosts file, spool dirs, fake GPU devices."""
        t = self._dir()
        spools = [f"spool/{node}" for node in self.nodes]
        for d in ("etc", "state", "run", "log", "dev", *spools):
            (t / d).mkdir(parents=True, exist_ok=True)
        hosts = "".join(f"{a} {h}\n" for h, a in self.addr.items())
        self.hosts.write_text(f"127.0.0.1 localhost\n{hosts}")
        etc = str(self._dir("etc"))
        self._written = []
        more = {**self.files, **({} if self.topology is None else {"topology.conf": self.topology})}
        for name, text in more.items():
            path = self._dir("etc", name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.replace("@ETC@", etc).encode("utf-8", "surrogateescape"))
            self._written.append(path)
        auth = "AuthType=auth/none\nCredType=cred/none"
        if self.munge_plugins is not None:
            for host in ["run", CONTROLLER, *self.nodes]:
                self._dir("munge", host).mkdir(mode=0o700, parents=True, exist_ok=True)
            key = self._dir("munge", "munge.key")
            if not key.exists():
                subprocess.run(["mungekey", "-c", "-k", str(key)], check=True)
            plugins = "" if self.release is None else \
                f"\nPluginDir={release_dir(self.release) / 'lib' / 'slurm'}:{self.munge_plugins}"
            auth = (f"AuthType=auth/munge\nCredType=cred/munge\n"
                    f"AuthInfo=socket={self._dir('munge', 'run', 'munge.socket')}{plugins}")
        if release_version(self.release) >= (24, 11):
            # 24.11 and later want a cgroup.conf; 23.11 has no "disabled" plugin (slurm-facts §12)
            self._dir("etc", "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        gres = ""
        if self.gpus_per_node:
            last = self.gpus_per_node - 1
            for i in range(self.gpus_per_node):  # the gres plugin wants char devices
                dev = str(t / "dev" / f"nvidia{i}")
                if not os.path.exists(dev):  # made by start(), kept by reconfigure()
                    subprocess.run(["mknod", dev, "c", "1", "3"], check=True)
            gres = f" Gres=gpu:{self.gpus_per_node}"
            self._dir("etc", "gres.conf").write_text(
                f"AutoDetect=off\nName=gpu File={t}/dev/nvidia[0-{last}]\n"
            )
        n = self.cpus_per_node
        node_lines = "".join(
            f"NodeName={node} NodeAddr={self.addr[node]} CPUs={n} Boards=1 "
            f"SocketsPerBoard=1 CoresPerSocket={n} ThreadsPerCore=1 RealMemory=2000"
            f"{gres} State=UNKNOWN\n"
            for node in self.nodes if node not in self.dynamic
        ) + (f"MaxNodeCount={len(self.nodes)}\n" if self.dynamic else "")
        conf = f"""\
ClusterName={self.prefix}
SlurmctldHost={CONTROLLER}({self.addr[CONTROLLER]})
# no munge (unless munge_plugins): the whole cluster runs as root on one machine
{auth}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool/%n
SlurmctldPidFile={t}/run/slurmctld.pid
SlurmdPidFile={t}/run/slurmd-%n.pid
SlurmctldLogFile={t}/log/slurmctld.log
SlurmdLogFile={t}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# node lines claim more CPUs than the machine has
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
# every step gets SLURM_STEP_RESV_PORTS (count: max tasks per node + 1)
MpiParams=ports=12000-12999
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
KillWait=2
InactiveLimit=0
# heterogeneous jobs are started by backfill only: every second, not every 30 s
SchedulerParameters=bf_interval=1
# salloc without a command starts an interactive step (SLURM_STEP_ID=4294967290)
LaunchParameters=use_interactive_step
GresTypes=gpu
{self.extra_conf}
{node_lines}\
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
        if self.conf_edit is not None:
            conf = self.conf_edit(conf)
        self.conf.write_bytes(conf.replace("@ETC@", etc).encode("utf-8", "surrogateescape"))

    def _wrap(self, ns: str, hostname: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run in netns ``ns`` with our hostname and hosts file."""
        script = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'
        if self.munge_plugins is not None and self.tmp is not None:  # this host's munged
            munge = self._dir("munge")
            script = f'mount --bind "{munge}/$2" "{munge}/run" && {script}'
        return [
            "nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "--mount",
            "sh", "-c", script, "sh", str(self.hosts), hostname, *argv,
        ]  # fmt: skip

    def _spawn(self, name: str, ns: str, hostname: str, argv: Sequence[str]) -> None:
        # nsenter, unshare and sh all exec: the Popen pid ends up being the daemon
        with (self.log_dir / f"{name}.out").open("wb") as out:  # errors before logging
            self.procs[name] = subprocess.Popen(
                self._wrap(ns, hostname, argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self._env(),
            )

    def _wait_idle(self) -> None:
        states: dict[str, str] = {}

        def idle() -> bool:
            states.update(self._node_states())
            return all(states.get(n) == "idle" for n in self.nodes)

        self._wait_for(idle, lambda: f"idle nodes (last seen: {states})")

    def logs(self, lines: int = 25) -> str:
        """The tails of all daemon logs, for error messages."""
        if self.tmp is None:
            return ""
        return "\n".join(
            f"==> {p.name} <==\n{_tail(p, lines)}" for p in sorted(self.log_dir.iterdir())
        )

    # -- running commands -----------------------------------------------------------
    def _env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        # the caller's environment without Slurm variables (pytest may run in a job)
        base = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_DROP)}
        base["SLURM_CONF"] = str(self.conf)
        base.update(env or {})
        if self.release is not None:  # after the caller's PATH: its srun must be this release's
            base["PATH"] = _release_path(self.release, base.get("PATH", "/usr/bin:/bin"))
            lib = str(release_dir(self.release) / "lib")
            base["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (lib, base.get("LD_LIBRARY_PATH", "")) if p)
        return base

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        input: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` (srun, sbatch, sinfo, ``bash -c``...) as if on the controller.

        The caller's environment is inherited (tasks find python3 and the project:
        they run on this same filesystem), plus ``SLURM_CONF`` and ``env``.
        """
        return subprocess.run(
            self._wrap(self.ctl_ns, CONTROLLER, argv),
            env=self._env(env),
            timeout=timeout,
            input=input,
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
        )

    def srun(
        self,
        args: Sequence[str],
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> SrunResult:
        """``srun --label ARGS COMMAND``, with the output split per rank.

        Heterogeneous step: ``srun(["-N1", "-n1", *cmd0, ":", "-N2", "-n2"], cmd1)``;
        ranks are global across the components.
        """
        res = self.run(["srun", "--label", *args, *command], env=env, timeout=timeout)
        return SrunResult(res.returncode, res.stdout, res.stderr, parse_labels(res.stdout))

    def sbatch(
        self,
        script: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> BatchResult:
        """Submit ``script``, wait for the job, return its exit code and output."""
        jobdir = Path(tempfile.mkdtemp(prefix="job-", dir=self._dir()))
        path, out, err = jobdir / "job.sh", jobdir / "out.txt", jobdir / "err.txt"
        path.write_text(script)
        argv = ["sbatch", "--parsable", f"--output={out}", f"--error={err}"]
        sub = self.run([*argv, f"--chdir={jobdir}", *args, str(path)], env=env)
        if sub.returncode != 0:
            raise RuntimeError(f"sbatch failed: {sub.stderr}")
        job_id = int(sub.stdout.strip().split(";")[0])
        # poll ourselves: `sbatch --wait` sleeps 2 s and more between its checks
        deadline = time.monotonic() + timeout
        active = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED")
        while True:
            show = self.run(["scontrol", "-o", "show", "job", str(job_id)]).stdout
            state = re.search(r"\bJobState=(\S+)", show)
            if state and state.group(1) not in active:
                break
            if time.monotonic() > deadline:
                self.run(["scancel", str(job_id)])
                raise TimeoutError(f"job {job_id} did not finish in {timeout}s: {show}")
            time.sleep(0.1)
        code = re.search(r"\bExitCode=(\d+):(\d+)", show)
        if not code:
            raise RuntimeError(f"no exit code for job {job_id}: {show}")
        rc = -int(code.group(2)) if int(code.group(2)) else int(code.group(1))
        return BatchResult(
            job_id,
            rc,
            out.read_text() if out.exists() else "",
            err.read_text() if err.exists() else "",
        )
