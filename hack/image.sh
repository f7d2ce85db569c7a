#!/usr/bin/env bash
# `make image`: trainguard's release image as one archive file, without a
# registry or a container engine. The archive is a docker-archive
# (manifest.json + config + layers) that every loader takes:
#   docker load -i ARCHIVE
#   ctr -n k8s.io images import ARCHIVE        (containerd, e.g. on a node)
#   kind load image-archive ARCHIVE
#   podman load -i ARCHIVE
# The image is tagged IMAGE (by default the chart's own image,
# ghcr.io/trainguard/trainguard:<release>), so a loaded image is what
# `helm install` runs with pullPolicy IfNotPresent, no --set needed.
#
# Contents: the same two static binaries the Dockerfile builds (/trainguard,
# /trainguard-agent), a passwd/group naming the nonroot user 65532, user
# 65532:65532, entrypoint /trainguard. The image writer is hack/tools/ocimage,
# the one `make e2e-images` uses.
#
# Environment (the Makefile sets them): IMAGE, IMAGE_ARCHIVE, VERSION,
# COMMIT, IMAGE_ARCH (GOARCH of the binaries; default: this machine's).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
: "${IMAGE:?IMAGE (e.g. ghcr.io/trainguard/trainguard:0.1.0) is required}"
: "${IMAGE_ARCHIVE:?IMAGE_ARCHIVE (the output file) is required}"
: "${VERSION:?VERSION is required}"
COMMIT=${COMMIT:-}
IMAGE_ARCH=${IMAGE_ARCH:-$(go env GOARCH)}

work=$(mktemp -d "${TMPDIR:-/tmp}/trainguard-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs/etc" "$(dirname "$IMAGE_ARCHIVE")"

pkg=github.com/trainguard/trainguard/internal/foundations/version
echo "image: building /trainguard and /trainguard-agent $VERSION${COMMIT:+ ($COMMIT)} for linux/$IMAGE_ARCH"
(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=$IMAGE_ARCH go build -trimpath \
  -ldflags "-s -w -X $pkg.Version=$VERSION -X $pkg.Commit=$COMMIT" -o "$work/rootfs/trainguard" ./cmd/trainguard)
(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=$IMAGE_ARCH go build -trimpath \
  -ldflags "-s -w" -o "$work/rootfs/trainguard-agent" ./cmd/trainguard-agent)
# The image writer runs here, so it is built for this machine.
(cd "$root/hack/tools/ocimage" && CGO_ENABLED=0 GOOS= GOARCH= go build -trimpath -o "$work/ocimage" .)

# What distroless/static:nonroot names, so tools that map the numeric user
# to a name find it; trainguard itself never reads them.
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$work/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$work/rootfs/etc/group"

"$work/ocimage" -o "$IMAGE_ARCHIVE" -tag "$IMAGE" -arch "$IMAGE_ARCH" \
  -file "$work/rootfs/trainguard:/trainguard:0755" \
  -file "$work/rootfs/trainguard-agent:/trainguard-agent:0755" \
  -file "$work/rootfs/etc/passwd:/etc/passwd:0644" \
  -file "$work/rootfs/etc/group:/etc/group:0644" \
  -entrypoint /trainguard -user 65532:65532
size=$(du -m "$IMAGE_ARCHIVE" | cut -f1)
cat <<EOF
image: wrote $IMAGE_ARCHIVE ($size MB), tagged $IMAGE
  load it with one of:
    docker load -i $IMAGE_ARCHIVE
    ctr -n k8s.io images import $IMAGE_ARCHIVE
    kind load image-archive $IMAGE_ARCHIVE
EOF
