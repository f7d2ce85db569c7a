#!/usr/bin/env bash
# Checks an archive from `make image` the way a node would take it: starts a
# private containerd (its own root, state and socket under a temporary
# directory; never the system's or the local cluster's), runs
# `ctr -n tg-test images import` (which unpacks it), checks the image is
# complete, mounts its root filesystem, runs `/trainguard version` from it and
# compares the output with the release, then removes everything it made.
# Needs root and containerd + ctr; `make image-check` runs it.
#
#   hack/image-import-check.sh ARCHIVE IMAGE VERSION
set -euo pipefail
archive=$1 image=$2 version=$3
[ "$(id -u)" = 0 ] || { echo "image-check: needs root (containerd mounts the image's layers)" >&2; exit 1; }
for t in containerd ctr; do
  command -v "$t" >/dev/null || { echo "image-check: $t not found; install containerd" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/trainguard-image-check.XXXXXX)
sock=$dir/containerd.sock pid=
cleanup() {
  if [ -n "$pid" ]; then
    [ -d "$dir/mnt" ] && ctr -a "$sock" -n tg-test images unmount "$dir/mnt" >/dev/null 2>&1 || true
    ctr -a "$sock" -n tg-test images rm "$image" >/dev/null 2>&1 || true
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
cat >"$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
TOML
containerd --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$dir/containerd.log" >&2; echo "image-check: containerd did not start" >&2; exit 1; }

ctr -a "$sock" -n tg-test images import "$archive"
ctr -a "$sock" -n tg-test images check "name==$image" | grep -q 'complete' ||
  { echo "image-check: $image is not complete after import" >&2; exit 1; }
mkdir "$dir/mnt"
ctr -a "$sock" -n tg-test images mount "$image" "$dir/mnt" >/dev/null
got=$("$dir/mnt/trainguard" version)
case "$got" in
  "$version" | "$version "*) echo "image-check: ctr imported $image; /trainguard version: $got" ;;
  *) echo "image-check: /trainguard version printed \"$got\", want release $version" >&2; exit 1 ;;
esac
