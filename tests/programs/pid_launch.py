"""Start ``mpirun`` with a PID chosen so that its Open MPI job family draws the port of a running
``mpirun`` of the same node: a real collision, for tests/test_real_mpi.py.

    python pid_launch.py JOBID PID mpirun ...

``JOBID`` is the running launch's ``OMPI_MCA_ess_base_jobid`` and ``PID`` its ``mpirun``'s PID.
Open MPI 4.x makes the job family from ``mpirun``'s host name and PID
(``orte_plm_base_set_hnp_name``: ``fold16(hash(nodename) ^ pid)``, with
``fold16(x) = (x >> 16) ^ (x & 0xffff)``, which is linear in XOR), so on one node
``family = fold16(hash) ^ fold16(pid)``: the running launch gives ``fold16(hash)``, and a PID
whose fold gives ``family ± 22746`` (the ports outside a job's block, by default) gives another
family that draws the same port. The PID is had by writing ``/proc/sys/kernel/ns_last_pid``
(root) just before a fork; a child that did not get it exits and the next PID is tried. A PID
above ``pid_max`` is allowed by raising ``pid_max`` for that fork only.

Prints ``PIDLAUNCH pid=P family=F expected`` and runs the command as that PID.
"""

import os
import sys

SPAN = 22768 - 22  # ports of the default range outside one job's block


def fold16(value: int) -> int:
    return ((value >> 16) ^ value) & 0xFFFF


def main() -> int:
    jobid, running_pid, command = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    family = jobid >> 16
    node_hash = family ^ fold16(running_pid)  # fold16(hash(nodename))
    wanted = [f for f in (family + SPAN, family - SPAN, family + 2 * SPAN, family - 2 * SPAN)
              if 0 <= f < 1 << 16]
    candidates = []
    for other in wanted:
        fold = other ^ node_hash
        for high in range(64):  # PIDs up to 2**22, Linux's largest pid_max
            pid = high << 16 | (fold ^ high)
            if pid > 300 and not os.path.exists(f"/proc/{pid}"):
                candidates.append((pid, other))
    candidates.sort()  # the lowest first: the kernel's pid_max is often 32768
    with open("/proc/sys/kernel/pid_max") as handle:
        pid_max = handle.read().strip()
    for pid, other in candidates[:200]:
        if pid >= int(pid_max):  # allowed for this fork only, then put back
            with open("/proc/sys/kernel/pid_max", "w") as handle:
                handle.write(str(1 << 22))
        with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
            handle.write(str(pid - 1))
        child = os.fork()
        if child == 0:
            if os.getpid() != pid:
                os._exit(99)
            print(f"PIDLAUNCH pid={pid} family={other} expected", flush=True)
            os.execvp(command[0], command)
        with open("/proc/sys/kernel/pid_max", "w") as handle:
            handle.write(pid_max)
        _, status = os.waitpid(child, 0)
        if child == pid:
            return os.waitstatus_to_exitcode(status)
    print("PIDLAUNCH no PID could be had", flush=True)
    return 98


if __name__ == "__main__":
    sys.exit(main())
