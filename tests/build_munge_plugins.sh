#!/bin/sh
# Build Slurm VERSION's auth/munge and cred/munge plugins (only them) into
# PREFIX/VERSION/munge-plugins, once (its .built stamp). Usage:
#   sh tests/build_munge_plugins.sh VERSION [PREFIX]
# tests/build_slurm.sh builds every release without munge (auth/none and cred/none are enough
# for static nodes), but dynamic nodes (slurmd -Z) need a credential plugin that makes "net
# credentials": cred/none's returns none, and srun then fails ("Can't find an address" /
# "Malformed RPC of type RESPONSE_NODE_ALIAS_ADDRS"). SlurmCluster(munge_plugins=...) loads
# these through PluginDir. About a minute a release (configure, then three small folders).
set -eu
version=$1
prefix=${2:-${SLURMENV_SLURM_PREFIX:-/opt/slurmenv-slurm}}
src=${SLURMENV_SLURM_SRC:-$(cd "$(dirname -- "$0")/.." && pwd)/../shared/slurm-src}
dest=$prefix/$version/munge-plugins
tarball=$src/slurm-$version.tar.xz
if [ -f "$dest/.built" ]; then exit 0; fi
if [ ! -f "$tarball" ]; then
  echo "no source for Slurm $version ($tarball): its munge plugins are not built" >&2
  exit 3
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=""
  for pkg in build-essential libjson-c-dev libyaml-dev pkg-config xz-utils libmunge-dev munge; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    apt-get update -qq
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/slurm-munge-$version.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "building Slurm $version's munge plugins into $dest (about a minute)"
tar -C "$work" -xJf "$tarball"
cd "$work"/*/
# the same configure line as tests/build_slurm.sh, with munge
./configure -q --prefix="$prefix/$version" --sysconfdir="$prefix/$version/etc" --disable-debug \
  --disable-slurmrestd --disable-x11 --disable-sview --without-hdf5 --without-pmix --without-ucx \
  --without-rdkafka --without-nvml --without-rsmi --without-oneapi --without-freeipmi \
  --without-lua --with-munge >build.log 2>&1 || { tail -30 build.log >&2; exit 1; }
for dir in src/plugins/cred/common src/plugins/cred/munge src/plugins/auth/munge; do
  make -C "$dir" >>build.log 2>&1 || { tail -30 build.log >&2; exit 1; }
done
rm -rf "$dest"
mkdir -p "$dest"
cp src/plugins/cred/munge/.libs/cred_munge.so src/plugins/auth/munge/.libs/auth_munge.so "$dest/"
touch "$dest/.built"
