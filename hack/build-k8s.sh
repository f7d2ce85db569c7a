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

case "${1:-all}" in
  kube-apiserver) build_apiserver ;;
  etcd) build_etcd ;;
  all) build_etcd; build_apiserver ;;
  *) echo "usage: $0 [all|kube-apiserver|etcd]" >&2; exit 2 ;;
esac
