#!/bin/sh
# Build one Slurm release from ../shared/slurm-src/slurm-VERSION.tar.xz into PREFIX/VERSION,
# once: a prefix with a finished build (its .built stamp) is reused. Usage:
#   sh tests/build_slurm.sh VERSION [PREFIX]
# The recipe is slurm-facts.md §12's (auth/none and cred/none are built in; no munge, no
# PMIx, no cgroup v2 extras); about 6 minutes a release on 2 cores.
set -eu
version=$1
prefix=${2:-${SLURMENV_SLURM_PREFIX:-/opt/slurmenv-slurm}}
src=${SLURMENV_SLURM_SRC:-$(cd "$(dirname -- "$0")/.." && pwd)/../shared/slurm-src}
dest=$prefix/$version
tarball=$src/slurm-$version.tar.xz
if [ -f "$dest/.built" ]; then exit 0; fi
if [ ! -f "$tarball" ]; then
  echo "no source for Slurm $version ($tarball): that release is not built" >&2
  exit 3
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=""
  for pkg in build-essential libjson-c-dev libyaml-dev pkg-config xz-utils; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    apt-get update -qq
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/slurm-build-$version.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "building Slurm $version into $dest (about 6 minutes)"
tar -C "$work" -xJf "$tarball"
cd "$work"/*/
rm -rf "$dest"
./configure -q --prefix="$dest" --sysconfdir="$dest/etc" --disable-debug --disable-slurmrestd \
  --disable-x11 --disable-sview --without-hdf5 --without-pmix --without-ucx --without-rdkafka \
  --without-nvml --without-rsmi --without-oneapi --without-freeipmi --without-lua --without-munge >build.log 2>&1 ||
  { tail -30 build.log >&2; exit 1; }
{ make -j"$(nproc)" && make install; } >>build.log 2>&1 || { tail -30 build.log >&2; exit 1; }
touch "$dest/.built"
