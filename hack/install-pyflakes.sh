#!/usr/bin/env bash
# Installs pyflakes into bin/pyflakes for `make lint` (the SDK, the example
# trainer and hack/*.py): taken from Debian's python3-pyflakes (pure Python,
# no dependencies) and extracted without installing it; PyPI is not reachable.
# pyflakes finds what breaks at run time or hides a mistake (undefined and
# unused names, redefinitions, bad format strings) and leaves style alone.
# Re-extracted only when the package's version differs from the stamp. .ci/run
# calls it in its packages chain; `make lint` calls it too, so apt may be busy
# with another chain: each apt step waits for the lock.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${PYFLAKES_DIR:-$root/bin/pyflakes}
pkg=python3-pyflakes

# apt-get's lists lock is not waited for: retry for up to 10 minutes.
retry() { local i; for i in $(seq 120); do "$@" && return 0; sleep 5; done; "$@"; }
candidate() { apt-cache policy "$pkg" 2>/dev/null | sed -n 's/^ *Candidate: //p'; }
version=$(candidate)
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  retry apt-get update -qq
  version=$(candidate)
fi
[ -n "$version" ] && [ "$version" != "(none)" ] || { echo "install-pyflakes: Debian serves no $pkg package (apt-cache policy $pkg)" >&2; exit 1; }

if [ -f "$out/pyflakes/__main__.py" ] && [ "$(cat "$out/.version" 2>/dev/null)" = "$version" ]; then
  echo "pyflakes $version: cached in $out"; exit 0
fi
echo "extracting pyflakes from Debian's $pkg $version..."
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d "$(dirname "$out")/.pyflakes.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 0777 "$tmp" # apt-get download writes as the _apt user
(cd "$tmp" && retry apt-get download -qq "$pkg=$version")
dpkg-deb -x "$tmp"/${pkg}_*.deb "$tmp/root"
mv "$tmp/root/usr/lib/python3/dist-packages" "$tmp/lib"
echo "$version" >"$tmp/lib/.version"
rm -rf "$out" && mv "$tmp/lib" "$out" # whole, so a concurrent run never sees half of it
PYTHONPATH="$out" /usr/bin/python3 -m pyflakes --version
