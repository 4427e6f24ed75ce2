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
  for pkg in slurmctld slurmd slurm-client iproute2 fish tcsh zsh shellcheck; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    echo "installing Debian packages:$missing"
    apt-get update -qq
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi

pip() { "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore "$@"; }
pip -e '.[test]'
# The frameworks the real-cluster tests train with (CPU builds).
"$PY" -c 'import torch' 2>/dev/null || pip torch==2.13.0
"$PY" -c 'import tensorflow' 2>/dev/null || pip tensorflow-cpu
"$PY" -c 'import jax' 2>/dev/null || pip jax

"$PY" -m ruff check .
"$PY" -m mypy
if command -v shellcheck >/dev/null 2>&1; then
  shellcheck bin/* tests/run.sh .ci/run
else
  echo "shellcheck not installed: shell shims not linted" >&2
fi
echo "SLURMENV_REQUIRE_CLUSTER=${SLURMENV_REQUIRE_CLUSTER:-} (1: every skip is a failure)"
"$PY" -m pytest "$@"
if [ -f benchmarks/bench.py ]; then
  "$PY" benchmarks/bench.py --short
fi
