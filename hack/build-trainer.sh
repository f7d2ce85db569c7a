#!/usr/bin/env bash
# Builds the Kubeflow Trainer v2 controller manager and the JobSet controller
# from Go modules into bin/trainer, for two version pairs:
#   v2.3.0 + v0.12.0 (hack/tools/trainer-v2.3): the newest the Go module proxy
#     serves; `make cluster` runs them and the TrainJob suite tests them;
#   v2.0.0 + v0.8.2 (hack/tools/trainer): kept in the TrainJob suite because
#     users still run it (its API still has elasticPolicy and numProcPerNode).
# Binaries are bin/trainer/<name>-<version>; each is rebuilt only when its
# stamp (bin/trainer/.<name>-<version>.version) is missing or differs.
# Usage: build-trainer.sh [all|latest|v2.0]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${TRAINER_BIN_DIR:-$root/bin/trainer}
mkdir -p "$out"

have() { [ -x "$out/$1" ] && [ "$(cat "$out/.$1.version" 2>/dev/null)" = "$2" ]; }

build() { # MODULE_DIR NAME VERSION PACKAGE
  local bin=$2-$3 t0
  if have "$bin" "$3"; then
    echo "$2 $3: cached in $out"; return
  fi
  echo "building $2 $3 (~1-3 min cold)..."
  t0=$(date +%s)
  (cd "$root/hack/tools/$1" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/$bin.tmp" "$4")
  mv "$out/$bin.tmp" "$out/$bin"
  echo "$3" >"$out/.$bin.version"
  echo "built $out/$bin in $(($(date +%s) - t0))s"
}

pair() { # MODULE_DIR TRAINER_VERSION JOBSET_VERSION
  build "$1" jobset-controller "$3" sigs.k8s.io/jobset
  build "$1" trainer-controller-manager "$2" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
}

case "${1:-all}" in
  latest) pair trainer-v2.3 v2.3.0 v0.12.0 ;;
  v2.0) pair trainer v2.0.0 v0.8.2 ;;
  all) pair trainer-v2.3 v2.3.0 v0.12.0; pair trainer v2.0.0 v0.8.2 ;;
  *) echo "usage: $0 [all|latest|v2.0]" >&2; exit 2 ;;
esac
