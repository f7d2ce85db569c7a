# Shared settings of hack/cluster/*.sh (sourced, not run). Every path, port,
# address range and name the local cluster uses is here, so cluster-down
# removes exactly what cluster-up made.
# shellcheck shell=bash
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The Kubernetes release the cluster runs (one of hack/build-k8s.sh's; README
# "Versions tested"): the tests' own release, so a cold machine compiles one
# Kubernetes tree for both. Its node binaries are linked by name into CLUSTER_BIN.
CLUSTER_KUBE_VERSION=${CLUSTER_KUBE_VERSION:-v1.37.2}
K8S_BIN=${K8S_BIN:-$root/bin/k8s/$CLUSTER_KUBE_VERSION} # kube-apiserver, etcd (hack/build-k8s.sh)
CLUSTER_BIN=${CLUSTER_BIN:-$root/bin/cluster} # everything else (hack/cluster/build-bins.sh)
# Runtime state: removed by cluster-down. Image stores persist in the cache dir
# (same images are not imported twice); `make cluster-clean` removes it too.
CLUSTER_DIR=${CLUSTER_DIR:-/tmp/trainguard-cluster}
CLUSTER_CACHE=${CLUSTER_CACHE:-$CLUSTER_BIN/cache}
NODES=${NODES:-3}
NODE_PREFIX=tg-node-
ETCD_PORT=23790
ETCD_PEER_PORT=23800
APISERVER_PORT=16443
KUBELET_PORT_BASE=10350      # node i: kubelet 10350+i, healthz 10360+i
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
DNS_SVC_IP=10.96.0.10
POD_CIDR=10.88.0.0/16
BRIDGE=tg-cni0
SVC_DUMMY=tg-svc0            # the service CIDR is routed here (a portless bridge): nothing leaves eth0
CNI_NET=trainguard-e2e
FW_CHAIN=TG-E2E-FORWARD      # drops pod traffic leaving the machine
CGROUP_PREFIX=tg-node-       # kubelet cgroupRoot /tg-node-<i>
KUBECONFIG_OUT=$CLUSTER_DIR/kubeconfig
IMAGE_TAG=e2e
TRAINER_IMAGE=localhost/pytorch:$IMAGE_TAG
# Kubeflow Trainer and JobSet the cluster runs: the newest the Go module proxy
# serves (hack/build-trainer.sh latest builds them into bin/trainer).
TRAINER_VERSION=v2.3.0
JOBSET_VERSION=v0.12.0
# Kueue: the newest the Go module proxy serves (hack/cluster/build-bins.sh kueue).
KUEUE_VERSION=v0.19.2

node_name() { echo "$NODE_PREFIX$1"; }
node_dir() { echo "$CLUSTER_DIR/nodes/$1"; }
node_sock() { echo "$CLUSTER_DIR/nodes/$1/containerd.sock"; }
host_ip() { ip -4 -o addr show dev "${HOST_IFACE:-eth0}" | awk '{print $4}' | cut -d/ -f1 | head -1; }
log() { printf '%s [cluster] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*"; exit 1; }
