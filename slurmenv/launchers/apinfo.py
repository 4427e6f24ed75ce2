"""PALS application files (``PALS_APINFO``): which node and local index every rank has, and
the node names, as Cray PALS and its emulations write them.

The file is raw C structs written back to back, on the node's own byte order (every writer
below runs on 64-bit little-endian Linux: x86_64 or aarch64). A header of sizes, offsets and
counts comes first; then the MPMD commands, one record per rank ("PE") and one per node:

* header: ``int version`` (padded to 8), then ``size_t total_size``, and for each of
  comm profiles, commands, PEs, nodes and NICs a ``size_t`` record size, a ``size_t`` offset
  and an ``int`` count (padded to 8). Version 5 appends ``size_t status_offset, dist_size,
  dist_offset``. So the header is 136 bytes in version 1 and 160 bytes in version 5.
* command: ``int npes, pes_per_node, cpus_per_pe`` (12 bytes);
* PE (rank ``i`` is record ``i``): ``int localidx, cmdidx, nodeidx`` (12 bytes);
* node (node index ``n`` is record ``n``): ``int nid; char hostname[64]`` (68 bytes).

The versions read here, and their writers:

* **version 1**: Slurm's ``mpi/cray_shasta`` up to 22.05 at least (structs in
  ``src/plugins/mpi/cray_shasta/apinfo.c``; Slurm 22.05.8 from Debian writes it, observed on
  the test cluster, ``tests/test_real_pals.py``), and Flux's ``cray-pals`` shell plugin
  (flux-coral2 ``src/shell/plugins/cray_pals.c`` calls ``apinfo_create(1)``);
* **version 5**: Slurm's current ``mpi/cray_shasta`` (``apinfo.h``: ``PALS_APINFO_VERSION 5``),
  HPE's libpals ``pals.h`` and flux-coral2's ``libapinfo/apinfo5.h``. Version 5 changed the
  comm-profile and NIC records and grew the header; the command, PE and node records, the
  only ones read here, are the same.

Any other version is refused: its records may differ and a silent misreading would put ranks
on the wrong nodes. Every count, size and offset is checked against the file's length, every
rank's node index against the node count, and the local indices of each node must be
``0..k-1``: a file that is not what the header says is refused, never half-read.
"""

from __future__ import annotations

from ..errors import SlurmEnvError
from ..lean import NamedTuple

VERSIONS = (1, 5)
HEADER_SIZE = {1: 136, 5: 160}
CMD_SIZE = 12
PE_SIZE = 12
NODE_SIZE = 68
HOSTNAME_SIZE = 64
VARIABLE = "PALS_APINFO"
FIX = (
    "PALS_APINFO must name the apinfo file the launcher wrote for this application (Cray PALS "
    "mpiexec, srun --mpi=cray_shasta, flux run -o pmi=cray-pals), read while it runs; or pass "
    "--master-addr and export only the torch variables (--for torch)"
)


class ApInfo(NamedTuple):
    """What an apinfo file says: rank ``i`` runs on node ``nodes[i]`` with local index
    ``local[i]`` in MPMD command ``cmds[i]``; node index ``n`` is host ``hosts[n]``."""

    version: int
    nodes: list[int]
    local: list[int]
    cmds: list[int]
    ncmds: int
    hosts: list[str]

    @property
    def counts(self) -> list[int]:
        """The number of ranks on each node, in node-index order."""
        counts = [0] * len(self.hosts)
        for node in self.nodes:
            counts[node] += 1
        return counts


def _refuse(message: str, path: str) -> SlurmEnvError:
    return SlurmEnvError(f"apinfo file {path}: {message}", variable=VARIABLE, value=path, fix=FIX)


def parse(data: bytes, path: str = "<apinfo>") -> ApInfo:
    """Parse the bytes of an apinfo file (``path`` names it in errors)."""
    import struct  # only when an apinfo file is read: never on the srun export path

    if len(data) < 4:
        raise _refuse(f"{len(data)} bytes, too short for a header", path)
    (version,) = struct.unpack_from("<i", data, 0)
    if version not in VERSIONS:
        raise SlurmEnvError(
            f"apinfo file {path} has format version {version}; slurmenv reads versions "
            f"{' and '.join(map(str, VERSIONS))} only (another version may lay its records "
            "out differently)",
            variable=VARIABLE,
            value=path,
            fix="pass --master-addr and export only the torch variables (--for torch), or "
            f"report the launcher and version {version} to slurmenv",
        )
    if len(data) < HEADER_SIZE[version]:
        raise _refuse(f"{len(data)} bytes, shorter than a version {version} header", path)
    # version, total_size, then (size, offset, count) for comm profiles, cmds, PEs, nodes, NICs
    fields = struct.unpack_from("<i4xQ" + "QQi4x" * 5, data, 0)
    total = fields[1]
    cmd_size, cmd_off, ncmds = fields[5:8]
    pe_size, pe_off, npes = fields[8:11]
    node_size, node_off, nnodes = fields[11:14]
    if total != len(data):
        raise _refuse(f"the header says {total} bytes but the file has {len(data)}", path)
    for what, size, want in (("command", cmd_size, CMD_SIZE), ("PE", pe_size, PE_SIZE),
                             ("node", node_size, NODE_SIZE)):  # fmt: skip
        if size != want:
            raise _refuse(f"{what} records of {size} bytes, not {want}", path)
    for what, size, off, count in (("command", cmd_size, cmd_off, ncmds),
                                   ("PE", pe_size, pe_off, npes),
                                   ("node", node_size, node_off, nnodes)):  # fmt: skip
        if count < 1 or off < HEADER_SIZE[version] or off + size * count > total:
            raise _refuse(
                f"{count} {what} records at offset {off} do not fit in {total} bytes", path
            )
    local: list[int] = []
    cmds: list[int] = []
    nodes: list[int] = []
    for localidx, cmdidx, nodeidx in struct.iter_unpack("<3i", data[pe_off : pe_off + 12 * npes]):
        if not (0 <= nodeidx < nnodes and 0 <= cmdidx < ncmds and localidx >= 0):
            raise _refuse(
                f"rank {len(nodes)} has node index {nodeidx}, command {cmdidx}, local index "
                f"{localidx} (nodes 0..{nnodes - 1}, commands 0..{ncmds - 1})",
                path,
            )
        local.append(localidx)
        cmds.append(cmdidx)
        nodes.append(nodeidx)
    hosts = []
    for n in range(nnodes):
        start = node_off + NODE_SIZE * n + 4
        raw = data[start : start + HOSTNAME_SIZE].partition(b"\0")[0]
        try:
            name = raw.decode("ascii")
        except UnicodeDecodeError:
            name = ""
        if not name or not name.isprintable() or " " in name:
            raise _refuse(f"node {n} has no usable host name ({raw!r})", path)
        hosts.append(name)
    if len(set(hosts)) != len(hosts):
        raise _refuse(f"a host is listed twice: {','.join(hosts)}", path)
    seen: list[list[int]] = [[] for _ in hosts]
    for node, index in zip(nodes, local):
        seen[node].append(index)
    for n, indices in enumerate(seen):
        if sorted(indices) != list(range(len(indices))):
            raise _refuse(
                f"the ranks on node {n} ({hosts[n]}) have local indices {sorted(indices)}, "
                f"not 0..{len(indices) - 1}",
                path,
            )
    return ApInfo(version, nodes, local, cmds, ncmds, hosts)


def read(path: str) -> ApInfo:
    """Read and parse the apinfo file at ``path``."""
    from .. import readfile as files

    data = files.read(path, VARIABLE, FIX)
    if data is None:
        raise SlurmEnvError(
            f"cannot read apinfo file {path}",
            variable=VARIABLE,
            value=path,
            fix="the launcher removes the file when the application ends: resolve inside the "
            "running task; " + FIX,
        ) from None
    return parse(data, path)
