#!/usr/bin/env bash
# Installs Debian's python3-torch for /usr/bin/python3 (PyPI is not reachable
# here). Skips the install when torch already imports.
set -euo pipefail
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "python3-torch: present"; exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-torch >/dev/null
/usr/bin/python3 -c 'import torch; print("python3-torch", torch.__version__)'
