#!/usr/bin/env bash
# Builds the Debian bookworm root filesystem of the e2e PyTorch image
# (python3 + Debian's python3-torch; no PyPI, no registry here) and caches it
# as a tarball. The repo's SDK and trainer are added as a separate image
# layer by hack/cluster/images.sh, so editing them never rebuilds this.
# Usage: pytorch-rootfs.sh <out.tar>
set -euo pipefail
out=${1:?usage: $0 <out.tar>}
stamp="bookworm minbase python3 python3-torch v1"
if [ -s "$out" ] && [ "$(cat "$out.version" 2>/dev/null)" = "$stamp" ]; then
  echo "pytorch rootfs: cached in $out"; exit 0
fi
command -v debootstrap >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
dir=$(mktemp -d /tmp/tg-pytorch-rootfs.XXXXXX)
cleanup() {
  # A chroot's /proc must be gone before the directory is removed.
  umount "$dir/proc" 2>/dev/null || true
  rm -rf --one-file-system "$dir"
}
trap cleanup EXIT
mirror=${TG_DEBIAN_MIRROR:-http://deb.debian.org/debian}
echo "debootstrap bookworm from $mirror (~90 s)..."
debootstrap --variant=minbase --include=python3 bookworm "$dir" "$mirror" >/tmp/tg-debootstrap.log 2>&1 ||
  { tail -20 /tmp/tg-debootstrap.log; exit 1; }
echo "installing python3-torch in the chroot (~60 s)..."
mount -t proc proc "$dir/proc"
chroot "$dir" /bin/sh -c 'apt-get install -y -qq --no-install-recommends python3-torch >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*'
umount "$dir/proc"
chroot "$dir" /usr/bin/python3 -c 'import torch; print("torch", torch.__version__, "in the image")'
# Numeric owner ids so the tarball means the same on any machine.
tar --numeric-owner -C "$dir" -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "$stamp" >"$out.version"
