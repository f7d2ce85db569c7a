#!/usr/bin/env bash
# Builds promtool from the Prometheus Go module pinned in hack/tools/promtool
# into bin/, for `promtool check rules` and `promtool test rules` on the
# chart's PrometheusRule (test/observability). Rebuilt only when the stamped
# version is missing, like hack/build-k8s.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${PROMTOOL_BIN_DIR:-$root/bin}
# Prometheus 3.x is published as the Go module version v0.3XX.Y.
version=$(cd "$root/hack/tools/promtool" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
mkdir -p "$out"

if [ -x "$out/promtool" ] && [ "$(cat "$out/.promtool.version" 2>/dev/null)" = "$version" ]; then
  echo "promtool $version: cached in $out"; exit 0
fi
echo "building promtool from github.com/prometheus/prometheus $version (a few minutes the first time)..."
# `promtool --version` prints the Prometheus release: module v0.3XX.Y is 3.XX.Y.
release="3.${version#v0.3}"
(cd "$root/hack/tools/promtool" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" \
  -o "$out/promtool" github.com/prometheus/prometheus/cmd/promtool)
echo "$version" >"$out/.promtool.version"
