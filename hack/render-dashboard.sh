#!/usr/bin/env bash
# Renders docs/dashboard.png: every query of the chart's Grafana dashboard is
# evaluated by Prometheus's PromQL engine over a simulated day of trainguard
# metrics (hack/tools/promtool/dashboard-data), then plotted with matplotlib
# (hack/dashboard/plot.py, Debian's python3-matplotlib for /usr/bin/python3).
# Intermediates go to a temporary directory; only the PNG is kept.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  echo "installing python3-matplotlib (Debian) for /usr/bin/python3..."
  apt-get update -qq && apt-get install -y -qq python3-matplotlib >/dev/null
fi
(cd "$root/hack/tools/promtool" && go build -o "$tmp/dashboard-data" ./dashboard-data)
"$tmp/dashboard-data" -dashboard "$root/charts/trainguard/dashboards/trainguard.json" -out "$tmp/panels.json"
/usr/bin/python3 "$root/hack/dashboard/plot.py" "$tmp/panels.json" "$root/docs/dashboard.png"
echo "wrote docs/dashboard.png ($(stat -c %s "$root/docs/dashboard.png") bytes)"
