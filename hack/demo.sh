#!/usr/bin/env bash
# make demo: a local kube-apiserver + etcd with trainguard serve wired in,
# running the sample jobs in examples/demo (PyTorchJobs, a KubeDL job, a
# pod, a Kubeflow Trainer runtime and TrainJobs). See hack/demo/main.go.
#
#   make demo              run, print the summary, tear everything down
#   DEMO_KEEP=1 make demo  keep it running (prints a kubeconfig) until Ctrl-C
#
# The Makefile builds bin/trainguard and bin/k8s (KUBE_VERSION: which
# release, test/controlplane/version.go) first; this script adds
# bin/helm (to render the chart's webhook configurations) when missing,
# builds the demo driver and hands over to it, so Ctrl-C reaches it directly
# and it tears down everything it started.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GO=${GO:-go}

for f in bin/trainguard "bin/k8s/${KUBE_VERSION:-v1.37.2}/kube-apiserver" bin/k8s/etcd; do
  if [[ ! -x $f ]]; then
    echo "demo: $f is missing; run 'make demo' (it builds it)" >&2
    exit 1
  fi
done
if [[ ! -x bin/helm ]]; then
  echo "==> installing bin/helm"
  make --no-print-directory "$ROOT/bin/helm"
fi

echo "==> building the demo driver (hack/demo)"
"$GO" build -o bin/trainguard-demo ./hack/demo
exec bin/trainguard-demo "$@"
