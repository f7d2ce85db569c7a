#!/usr/bin/env bash
# Builds the control-plane binaries the integration suite and `make demo` run
# (kube-apiserver, etcd) from Go modules, because setup-envtest cannot download
# here. Each binary is rebuilt only when its stamped version is missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${K8S_BIN_DIR:-$root/bin/k8s}
kube_version=v1.36.3
etcd_version=v3.6.8
mkdir -p "$out"

have() { [ -x "$out/$1" ] && [ "$(cat "$out/.$1.version" 2>/dev/null)" = "$2" ]; }

build_apiserver() {
  if have kube-apiserver "$kube_version"; then
    echo "kube-apiserver $kube_version: cached in $out"; return
  fi
  echo "building kube-apiserver $kube_version (first build takes ~6 min)..."
  (cd "$root/hack/tools/kube-apiserver" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36" \
    -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
  echo "$kube_version" >"$out/.kube-apiserver.version"
}

build_etcd() {
  if have etcd "$etcd_version"; then
    echo "etcd $etcd_version: cached in $out"; return
  fi
  echo "building etcd $etcd_version (~1 min)..."
  (cd "$root/hack/tools/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$out/etcd" go.etcd.io/etcd/server/v3)
  echo "$etcd_version" >"$out/.etcd.version"
}

# The rest of a real cluster for `make cluster` (hack/cluster/): one module,
# one `go build` for the five so shared packages compile once.
node_bins="kubelet kube-controller-manager kube-scheduler kube-proxy kubectl"
build_node() {
  local missing=""
  for b in $node_bins; do have "$b" "$kube_version" || missing="$missing $b"; done
  if [ -z "$missing" ]; then
    echo "kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl $kube_version: cached in $out"; return
  fi
  echo "building$missing $kube_version (first build takes ~10-15 min)..."
  local pkgs="" b
  for b in $missing; do pkgs="$pkgs k8s.io/kubernetes/cmd/$b"; done
  # shellcheck disable=SC2086 # word splitting of the package list is intended
  (cd "$root/hack/tools/kube-node" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36" \
    -o "$out/" $pkgs)
  for b in $missing; do echo "$kube_version" >"$out/.$b.version"; done
}

case "${1:-all}" in
  kube-apiserver) build_apiserver ;;
  etcd) build_etcd ;;
  all) build_etcd; build_apiserver ;;
  node) build_node ;;
  *) echo "usage: $0 [all|kube-apiserver|etcd|node]" >&2; exit 2 ;;
esac
