#!/usr/bin/env bash
# Sets the release everywhere it is written: internal/foundations/version/appversion.go
# (the one the Makefile and the binary read), the chart's version and
# appVersion (the image tag it deploys), and the Python SDK's version.
# test/install fails when any of them differ.
#
#   hack/set-version.sh 0.2.0
set -euo pipefail
v=${1:?usage: hack/set-version.sh X.Y.Z}
[[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "set-version: $v is not a semantic version X.Y.Z[-pre]" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
sed -i "s/^const AppVersion = \".*\"/const AppVersion = \"$v\"/" "$root/internal/foundations/version/appversion.go"
sed -i -e "s/^version: .*/version: $v/" -e "s/^appVersion: .*/appVersion: \"$v\"/" "$root/charts/trainguard/Chart.yaml"
sed -i "s/^version = \".*\"/version = \"$v\"/" "$root/sdk/python/pyproject.toml"
sed -i "s/^__version__ = \".*\"/__version__ = \"$v\"/" "$root/sdk/python/trainguard/__init__.py"
# README's install section names the release and the archive `make image` writes.
sed -i -E -e "s/trainguard-[0-9]+\.[0-9]+\.[0-9]+[-0-9A-Za-z.]*\.tar/trainguard-$v.tar/g" \
  -e "s/\`make version\` prints it \([^)]*\)/\`make version\` prints it ($v)/" "$root/README.md"
echo "release $v: internal/foundations/version/appversion.go, charts/trainguard/Chart.yaml, sdk/python/pyproject.toml, sdk/python/trainguard/__init__.py, README.md"
echo "then: go test ./test/install/ ./test/chart/ ./cmd/trainguard/"
