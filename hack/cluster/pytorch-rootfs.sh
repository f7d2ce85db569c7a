#!/usr/bin/env bash
# Builds the root filesystem of the e2e PyTorch image and caches it as a
# tarball: python3 and Debian's python3-torch, from the packages this host
# already installed for the tests (hack/install-python-deps.sh), unpacked by
# hack/cluster/host-rootfs.py. No second download through debootstrap, so a
# slow Debian mirror cannot push `make e2e` (or CI) past its limit, and the
# image runs exactly the torch build the host tests ran. The repo's SDK and
# trainer are added as a separate layer by hack/cluster/images.sh, so editing
# them never rebuilds this. Rebuilt when any package of the closure changes.
# Usage: pytorch-rootfs.sh <out.tar>
set -euo pipefail
out=${1:?usage: $0 <out.tar>}
root=$(cd "$(dirname "$0")/../.." && pwd)
pkgs="python3 python3-torch dash coreutils"
mkdir -p "$(dirname "$out")" # .ci/run builds it before anything else made bin/cluster
bash "$root/hack/install-python-deps.sh" >/dev/null
stamp="host-packages $(/usr/bin/python3 "$root/hack/cluster/host-rootfs.py" --digest $pkgs)"
if [ -s "$out" ] && [ "$(cat "$out.version" 2>/dev/null)" = "$stamp" ]; then
  echo "pytorch rootfs: cached in $out"; exit 0
fi
# shellcheck disable=SC2086 # one word per package
/usr/bin/python3 "$root/hack/cluster/host-rootfs.py" "$out" $pkgs
echo "$stamp" >"$out.version"
