#!/usr/bin/env bash
# Builds the control-plane binaries the integration suite and `make demo` run
# (kube-apiserver, etcd) from Go modules, because setup-envtest cannot download
# here. Each binary is rebuilt only when its stamped version is missing.
#
# Every Kubernetes release the suites run has its own directory,
# $out/<version>/ (kube-apiserver, the node binaries, and a link to the one
# etcd), built from its own module hack/tools/kubernetes/<version>/ (the
# replace lines differ per release). KUBE_VERSIONS picks the releases: by
# default the newest only (what the suites and the cluster run); `make
# k8s-bins-previous` builds the previous minor for `make test-kube-previous`
# (README "Versions tested"). A second tree costs a cold machine about 10
# CPU-minutes, so it stays out of `make test` and CI's cold path.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${K8S_BIN_DIR:-$root/bin/k8s}
kube_versions=${KUBE_VERSIONS:-v1.37.2}
etcd_version=v3.6.8
mkdir -p "$out"

have() { [ -x "$1/$2" ] && [ "$(cat "$1/.$2.version" 2>/dev/null)" = "$3" ]; }

# ldflags stamps the release so `--version` prints it (and kubelet reports it).
ldflags() {
  local minor=${1#v1.}; minor=${minor%%.*}
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$1 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
}

module() { # VERSION NAME: the tool module that pins this release
  local d="$root/hack/tools/kubernetes/$1/$2"
  [ -f "$d/go.mod" ] || { echo "no module for Kubernetes $1 in $d (DEVELOPERS.md: adding a release)" >&2; exit 2; }
  echo "$d"
}

# adopt DIR NAME VERSION: a binary built before releases had directories
# ($out/NAME stamped VERSION) is linked in instead of rebuilt.
adopt() {
  have "$out" "$2" "$3" || return 1
  ln -f "$out/$2" "$1/$2" 2>/dev/null || cp "$out/$2" "$1/$2"
  echo "$3" >"$1/.$2.version"
  echo "$2 $3: adopted from $out"
}

build_apiserver() { # VERSION
  local v=$1 dir="$out/$1"
  mkdir -p "$dir"
  ln -sf ../etcd "$dir/etcd" # envtest wants both in one directory
  if have "$dir" kube-apiserver "$v"; then
    echo "kube-apiserver $v: cached in $dir"; return
  fi
  adopt "$dir" kube-apiserver "$v" && return
  local mod; mod=$(module "$v" kube-apiserver)
  echo "building kube-apiserver $v (first build: about 12 min with etcd on 2 cores, docs/e2e.md#measured-cold)..."
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "$(ldflags "$v")" -o "$dir/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
  echo "$v" >"$dir/.kube-apiserver.version"
}

build_etcd() {
  if have "$out" etcd "$etcd_version"; then
    echo "etcd $etcd_version: cached in $out"; return
  fi
  echo "building etcd $etcd_version (first build: 1-2 min)..."
  (cd "$root/hack/tools/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$out/etcd" go.etcd.io/etcd/server/v3)
  echo "$etcd_version" >"$out/.etcd.version"
}

# The rest of a real cluster for `make cluster` (hack/cluster/): one module,
# one `go build` for the five so shared packages compile once.
node_bins="kubelet kube-controller-manager kube-scheduler kube-proxy kubectl"
build_node() { # VERSION
  local v=$1 dir="$out/$1" missing="" b
  mkdir -p "$dir"
  for b in $node_bins; do
    have "$dir" "$b" "$v" || adopt "$dir" "$b" "$v" || missing="$missing $b"
  done
  if [ -z "$missing" ]; then
    echo "kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl $v: cached in $dir"; return
  fi
  local mod pkgs=""; mod=$(module "$v" kube-node)
  echo "building$missing $v (first build takes ~10-15 min)..."
  for b in $missing; do pkgs="$pkgs k8s.io/kubernetes/cmd/$b"; done
  # shellcheck disable=SC2086 # word splitting of the package list is intended
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "$(ldflags "$v")" -o "$dir/" $pkgs)
  for b in $missing; do echo "$v" >"$dir/.$b.version"; done
}

each() { local v; for v in $kube_versions; do "$1" "$v"; done; }

case "${1:-all}" in
  kube-apiserver) each build_apiserver ;;
  etcd) build_etcd ;;
  all) build_etcd; each build_apiserver ;;
  node) each build_node ;;
  *) echo "usage: [KUBE_VERSIONS=...] $0 [all|kube-apiserver|etcd|node]" >&2; exit 2 ;;
esac
