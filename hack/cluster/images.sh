#!/usr/bin/env bash
# Builds every image the local cluster runs as a docker-archive tarball in
# bin/cluster/images (no registry, no container engine: hack/tools/ocimage),
# each rebuilt only when its inputs change. up.sh imports them into every
# node's containerd; pods use them with imagePullPolicy: Never.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
out=$CLUSTER_BIN/images
mkdir -p "$out"
oci=$CLUSTER_BIN/ocimage

# image NAME INPUTS... -- OCIMAGE-ARGS: rebuild NAME.tar when the inputs' hash changed.
image() {
  local name=$1; shift
  local inputs=() h
  while [ "$1" != "--" ]; do inputs+=("$1"); shift; done; shift
  h=$( (echo "$*"; find "${inputs[@]}" -type f -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)
  if [ -s "$out/$name.tar" ] && [ "$(cat "$out/.$name.inputs" 2>/dev/null)" = "$h" ]; then
    echo "image $name: cached"; return
  fi
  echo "image $name: building"
  "$oci" -o "$out/$name.tar" -tag "localhost/$name:$IMAGE_TAG" "$@"
  echo "$h" >"$out/.$name.inputs"
}

b=$CLUSTER_BIN
image pause "$b/pause" -- -file "$b/pause:/pause:0755" -entrypoint /pause -user 65535:65535
image coredns "$b/coredns" -- -file "$b/coredns:/coredns:0755" -entrypoint /coredns
image training-operator "$b/training-operator" -- -file "$b/training-operator:/manager:0755" -entrypoint /manager -user 65532:65532
# Kubeflow Trainer and JobSet (hack/build-trainer.sh latest → bin/trainer).
tb=$root/bin/trainer
image trainer-controller-manager "$tb/trainer-controller-manager-$TRAINER_VERSION" -- \
  -file "$tb/trainer-controller-manager-$TRAINER_VERSION:/manager:0755" -entrypoint /manager -user 65532:65532
image jobset-controller "$tb/jobset-controller-$JOBSET_VERSION" -- \
  -file "$tb/jobset-controller-$JOBSET_VERSION:/manager:0755" -entrypoint /manager -user 65532:65532
image kueue "$b/kueue" -- -file "$b/kueue:/manager:0755" -entrypoint /manager -user 65532:65532
for c in controller cainjector webhook; do
  image "cert-manager-$c" "$b/cert-manager-$c" -- -file "$b/cert-manager-$c:/app/cmd/$c/$c:0755" \
    -entrypoint "/app/cmd/$c/$c" -user 1000:1000
done
# trainguard from `make build` (the Makefile target runs it first).
[ -x "$root/bin/trainguard" ] && [ -x "$root/bin/trainguard-agent" ] || die "run make build first"
image trainguard "$root/bin/trainguard" "$root/bin/trainguard-agent" -- \
  -file "$root/bin/trainguard:/trainguard:0755" -file "$root/bin/trainguard-agent:/trainguard-agent:0755" \
  -entrypoint /trainguard -user 65532:65532
# PyTorch: Debian bookworm + python3-torch (cached rootfs) + the SDK and example trainer.
bash "$root/hack/cluster/pytorch-rootfs.sh" "$CLUSTER_BIN/pytorch-rootfs.tar"
image pytorch "$CLUSTER_BIN/pytorch-rootfs.tar" "$root/sdk/python/trainguard" "$root/sdk/python/scripts" "$root/examples/trainer" -- \
  -base "$CLUSTER_BIN/pytorch-rootfs.tar" \
  -file "$root/sdk/python/trainguard:/opt/trainguard/sdk/trainguard" \
  -file "$root/sdk/python/scripts/trainguard-python:/usr/local/bin/trainguard-python:0755" \
  -file "$root/examples/trainer:/opt/trainguard/trainer" \
  -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -env PYTHONPATH=/opt/trainguard/sdk \
  -env PYTHONUNBUFFERED=1 -workdir /opt/trainguard/trainer -entrypoint /usr/bin/python3
ls -la "$out" | awk 'NR>1 && /\.tar$/ {printf "  %-28s %6.1f MB\n", $9, $5/1048576}'
