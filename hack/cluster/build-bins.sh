#!/usr/bin/env bash
# Builds every binary `make cluster` runs besides kube-apiserver and etcd
# (hack/build-k8s.sh builds those into bin/k8s): kubelet, kube-controller-manager,
# kube-scheduler, kube-proxy and kubectl (hack/build-k8s.sh node), CoreDNS, the
# kubeflow training-operator, Kueue, cert-manager's three commands, the pause
# process, the image writer and the e2e harness. All from Go modules, each
# cached in bin/cluster with a version stamp so reruns are instant.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=hack/cluster/lib.sh
. "$root/hack/cluster/lib.sh" # CLUSTER_KUBE_VERSION
out=${CLUSTER_BIN:-$root/bin/cluster}
mkdir -p "$out"
coredns_version=v1.15.0
operator_version=v1.9.4
certmanager_version=v1.11.5
# The newest Kueue the Go module proxy serves (no replace lines: go install works).
kueue_version=v0.19.2 # keep in step with KUEUE_VERSION in lib.sh

have() { [ -x "$out/$1" ] && [ "$(cat "$out/.$1.version" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" >"$out/.$1.version"; }

build_coredns() {
  have coredns "$coredns_version" && { echo "coredns $coredns_version: cached"; return; }
  echo "building coredns $coredns_version (~2 min)..."
  GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$coredns_version"
  stamp coredns "$coredns_version"
}

build_operator() {
  have training-operator "$operator_version" && { echo "training-operator $operator_version: cached"; return; }
  echo "building kubeflow training-operator $operator_version (~1.5 min)..."
  local tmp; tmp=$(mktemp -d)
  GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
    "github.com/kubeflow/training-operator/cmd/training-operator.v1@$operator_version"
  mv "$tmp/training-operator.v1" "$out/training-operator"; rmdir "$tmp"
  stamp training-operator "$operator_version"
}

build_kueue() {
  have kueue "$kueue_version" && { echo "kueue $kueue_version: cached"; return; }
  echo "building kueue $kueue_version (~3 min)..."
  local tmp; tmp=$(mktemp -d)
  GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$kueue_version"
  mv "$tmp/kueue" "$out/kueue"; rmdir "$tmp"
  stamp kueue "$kueue_version"
}

build_certmanager() {
  local c missing=""
  for c in cainjector controller webhook; do
    have "cert-manager-$c" "$certmanager_version" || missing="$missing $c"
  done
  [ -z "$missing" ] && { echo "cert-manager $certmanager_version: cached"; return; }
  echo "building cert-manager$missing $certmanager_version (~3 min)..."
  for c in $missing; do
    (cd "$root/hack/tools/cert-manager" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
      -o "$out/cert-manager-$c" "github.com/cert-manager/cert-manager/cmd/$c")
    stamp "cert-manager-$c" "$certmanager_version"
  done
}

# Local tools are rebuilt whenever their sources change (cheap with the go cache).
build_local() {
  (cd "$root/hack/tools/ocimage" && CGO_ENABLED=0 go build -trimpath -o "$out/ocimage" .)
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/pause" ./hack/cluster/pause)
}

# build_node: the cluster's release of the node binaries into $out/<version>/,
# linked by name into $out (the scripts, the e2e harness and `make goodput`
# run $out/kubectl, $out/kubelet, ...).
build_node() {
  local b
  KUBE_VERSIONS="$CLUSTER_KUBE_VERSION" K8S_BIN_DIR="$out" bash "$root/hack/build-k8s.sh" node
  for b in kubelet kube-controller-manager kube-scheduler kube-proxy kubectl; do
    ln -sfn "$CLUSTER_KUBE_VERSION/$b" "$out/$b"
  done
}

# The cluster's add-ons (their own modules, nothing shared with Kubernetes'
# build: .ci/run builds them beside it).
build_addons() { build_coredns; build_operator; build_kueue; build_certmanager; }

case "${1:-all}" in
  coredns) build_coredns ;;
  operator) build_operator ;;
  kueue) build_kueue ;;
  cert-manager) build_certmanager ;;
  local) build_local ;;
  node) build_node ;;
  addons) build_addons ;;
  all) build_local; build_addons; build_node ;;
  *) echo "usage: $0 [all|node|addons|coredns|operator|kueue|cert-manager|local]" >&2; exit 2 ;;
esac
