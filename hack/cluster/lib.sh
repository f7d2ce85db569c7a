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
# Node 1 keeps the cluster's services; the e2e harness splits the other nine
# into lanes of scenarios that run side by side (test/e2e/e2e_test.go).
NODES=${NODES:-10}
MAX_NODES=20                 # the port ranges below hold 20 nodes
NODE_PREFIX=tg-node-
ETCD_PORT=23790
ETCD_PEER_PORT=23800
APISERVER_PORT=16443
# Node i: kubelet 10400+i, healthz 10420+i, containerd streaming 10440+i
# (clear of the control plane's 10349-10359).
KUBELET_PORT_BASE=10400
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
DNS_SVC_IP=10.96.0.10
POD_CIDR=10.88.0.0/16
BRIDGE=tg-cni0
SVC_DUMMY=tg-svc0            # the service CIDR is routed here (a portless bridge): nothing leaves eth0
CNI_NET=trainguard-e2e
FW_CHAIN=TG-E2E-FORWARD      # drops pod traffic leaving the machine
PARTITION_CHAIN=TG-E2E-PARTITION # node-ctl.sh freeze: drops the traffic of a partitioned node's pods
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
case "$NODES" in [1-9] | 1[0-9] | 20) ;; *) echo "NODES must be 1-$MAX_NODES, got $NODES" >&2; exit 1 ;; esac
log() { printf '%s [cluster] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*"; exit 1; }
