#!/usr/bin/env bash
# Builds the Kubeflow Trainer v2 controller manager and the JobSet controller
# from Go modules (pinned in hack/tools/trainer) into bin/trainer, for the TrainJob
# integration suite (test/trainer). Each binary is rebuilt only when its
# stamped version (bin/k8s/.<name>.version) is not the wanted one.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${TRAINER_BIN_DIR:-$root/bin/trainer}
trainer_version=v2.0.0
jobset_version=v0.8.2
mkdir -p "$out"

have() { [ -x "$out/$1" ] && [ "$(cat "$out/.$1.version" 2>/dev/null)" = "$2" ]; }

build() { # name version package
  if have "$1" "$2"; then
    echo "$1 $2: cached in $out"; return
  fi
  echo "building $1 $2 (~1-2 min)..."
  (cd "$root/hack/tools/trainer" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/$1.tmp" "$3")
  mv "$out/$1.tmp" "$out/$1"
  echo "built $out/$1 ($2)"
  echo "$2" >"$out/.$1.version"
}

case "${1:-all}" in
  trainer) build trainer-controller-manager "$trainer_version" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager ;;
  jobset) build jobset-controller "$jobset_version" sigs.k8s.io/jobset ;;
  all)
    build jobset-controller "$jobset_version" sigs.k8s.io/jobset
    build trainer-controller-manager "$trainer_version" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager ;;
  *) echo "usage: $0 [all|trainer|jobset]" >&2; exit 2 ;;
esac
