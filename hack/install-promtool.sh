#!/usr/bin/env bash
# Installs promtool into bin/ for `promtool check rules` and `promtool test
# rules` on the chart's PrometheusRule (test/observability): taken from
# Debian's prometheus package, extracted without installing it (no daemon, no
# service user, none of its web dependencies). Building it from the Prometheus
# Go module cost a cold machine about 28 minutes of CI's prepare phase.
# Re-extracted only when the package's version differs from the stamp.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${PROMTOOL_BIN_DIR:-$root/bin}
mkdir -p "$out"

candidate() { apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: //p'; }
version=$(candidate)
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  apt-get update -qq
  version=$(candidate)
fi
[ -n "$version" ] && [ "$version" != "(none)" ] || { echo "install-promtool: Debian serves no prometheus package (apt-cache policy prometheus)" >&2; exit 1; }

if [ -x "$out/promtool" ] && [ "$(cat "$out/.promtool.version" 2>/dev/null)" = "$version" ]; then
  echo "promtool $version: cached in $out"; exit 0
fi
echo "extracting promtool from Debian's prometheus $version..."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 0777 "$tmp" # apt-get download writes as the _apt user
(cd "$tmp" && apt-get download -qq "prometheus=$version")
dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool
install -m 0755 "$tmp/usr/bin/promtool" "$out/promtool"
echo "$version" >"$out/.promtool.version"
"$out/promtool" --version | head -1
