#!/usr/bin/env bash
# `make cluster`: a real Kubernetes cluster on this machine. etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy and
# NODES (default 10) nodes, each a kubelet with its own containerd; CNI bridge
# networking, CoreDNS, then cert-manager and the kubeflow training-operator as
# pods. Every binary and image is built here from Go modules / Debian
# packages (no registry). Prints the kubeconfig path. hack/cluster/down.sh
# removes everything this starts, also after a failed run.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/certs.sh"
. "$(dirname "$0")/node.sh"
t0=$(date +%s)
[ "$(id -u)" = 0 ] || die "must run as root (kubelet, containerd, iptables, cgroups)"
[ -n "$(host_ip)" ] || die "no IPv4 address on ${HOST_IFACE:-eth0}; set HOST_IFACE"

install_packages() {
  local missing=""
  need() { command -v "$1" >/dev/null 2>&1 || [ -e "$1" ] || missing="$missing $2"; }
  need containerd containerd; need runc runc; need /usr/lib/cni/bridge containernetworking-plugins
  need iptables iptables; need conntrack conntrack; need openssl openssl
  need curl curl
  [ -z "$missing" ] && return
  log "installing Debian packages:$missing"
  apt-get update -qq
  # shellcheck disable=SC2086 # one word per package
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

build_all() {
  log "binaries (cached in bin/)"
  KUBE_VERSIONS="$CLUSTER_KUBE_VERSION" bash "$root/hack/build-k8s.sh" all | sed 's/^/  /'
  bash "$root/hack/cluster/build-bins.sh" all | sed 's/^/  /'
  bash "$root/hack/build-trainer.sh" latest | sed 's/^/  /'
  log "images (cached in bin/cluster/images)"
  bash "$root/hack/cluster/images.sh" | sed 's/^/  /'
}

# Host networking: forwarding for the pod bridge, bridged traffic through
# iptables (service DNAT between pods on one bridge), the service CIDR routed
# to a portless local interface so an unmatched ClusterIP is dropped here instead of
# leaving via the default route, and pods never forwarded out of the machine.
host_network() {
  mkdir -p "$CLUSTER_DIR"
  [ -f "$CLUSTER_DIR/sysctl.saved" ] || {
    echo "net.ipv4.ip_forward=$(cat /proc/sys/net/ipv4/ip_forward)"
    echo "net.bridge.bridge-nf-call-iptables=$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo 0)"
  } >"$CLUSTER_DIR/sysctl.saved"
  sysctl -qw net.ipv4.ip_forward=1
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  # A bridge without ports (this kernel has no dummy driver): packets routed
  # to it go nowhere; kube-proxy's DNAT reroutes service traffic before that.
  ip link show "$SVC_DUMMY" >/dev/null 2>&1 || ip link add "$SVC_DUMMY" type bridge
  ip link set "$SVC_DUMMY" up
  ip route replace "$SERVICE_CIDR" dev "$SVC_DUMMY"
  iptables -w -N "$FW_CHAIN" 2>/dev/null || iptables -w -F "$FW_CHAIN"
  iptables -w -A "$FW_CHAIN" -s "$POD_CIDR" -d "$POD_CIDR" -j RETURN
  iptables -w -A "$FW_CHAIN" -s "$POD_CIDR" -o "${HOST_IFACE:-eth0}" -j DROP
  iptables -w -C FORWARD -j "$FW_CHAIN" 2>/dev/null || iptables -w -I FORWARD -j "$FW_CHAIN"
  # Empty until node-ctl.sh freeze cuts a node's pods; first in every path a
  # pod's packet takes (to another pod, to this host, from this host).
  iptables -w -N "$PARTITION_CHAIN" 2>/dev/null || iptables -w -F "$PARTITION_CHAIN"
  local c
  for c in FORWARD INPUT OUTPUT; do
    iptables -w -C "$c" -j "$PARTITION_CHAIN" 2>/dev/null || iptables -w -I "$c" -j "$PARTITION_CHAIN"
  done
}

wait_for() { # DESCRIPTION TIMEOUT_S CMD...
  local what=$1 t=$2 n=0; shift 2
  until "$@" >/dev/null 2>&1; do
    n=$((n + 1)); [ $n -gt $((t * 5)) ] && die "$what not ready after ${t}s; logs in $CLUSTER_DIR/logs"
    sleep 0.2
  done
}

start_control_plane() {
  local ip; ip=$(host_ip)
  log "etcd, kube-apiserver"
  start_proc etcd "$CLUSTER_DIR/logs/etcd.log" "$K8S_BIN/etcd" --data-dir "$CLUSTER_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --quota-backend-bytes 4294967296
  wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  local p=$CLUSTER_DIR/pki
  start_proc kube-apiserver "$CLUSTER_DIR/logs/kube-apiserver.log" "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 0.0.0.0 --advertise-address "$ip" \
    --secure-port "$APISERVER_PORT" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --client-ca-file "$p/ca.crt" --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction,PodNodeSelector \
    --service-cluster-ip-range "$SERVICE_CIDR" --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP,Hostname --allow-privileged=true --v=1
  wait_for kube-apiserver 90 kc get --raw /readyz
  log "kube-controller-manager, kube-scheduler"
  start_proc kube-controller-manager "$CLUSTER_DIR/logs/kube-controller-manager.log" "$CLUSTER_BIN/kube-controller-manager" \
    --kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" --controllers '*' --use-service-account-credentials \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --cluster-cidr "$POD_CIDR" --allocate-node-cidrs=false \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 10357 --v=1
  start_proc kube-scheduler "$CLUSTER_DIR/logs/kube-scheduler.log" "$CLUSTER_BIN/kube-scheduler" \
    --kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" --leader-elect=false --bind-address 127.0.0.1 --secure-port 10359 --v=1
}

# kube-proxy starts once its node (tg-node-1) is registered: started before,
# it exits when the node appears with its addresses ("NodeIPs changed", it
# expects a DaemonSet to restart it), and the add-ons' Services then lead
# nowhere. No Service is used before the add-ons.
start_kube_proxy() {
  log "kube-proxy"
  cat >"$CLUSTER_DIR/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $CLUSTER_DIR/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $(node_name 1)
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10356
metricsBindAddress: 127.0.0.1:10349
conntrack: {maxPerCore: 0}
iptables: {masqueradeAll: true}
YAML
  # One kube-proxy serves every node: they share this host's network namespace.
  start_proc kube-proxy "$CLUSTER_DIR/logs/kube-proxy.log" "$CLUSTER_BIN/kube-proxy" --config "$CLUSTER_DIR/kube-proxy.yaml" --v=1
}

kc() { "$CLUSTER_BIN/kubectl" --kubeconfig "$KUBECONFIG_OUT" "$@"; }

nodes_ready() {
  [ "$(kc get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)" -ge "$NODES" ]
}

main() {
  if [ "${1:-}" = --packages-only ]; then install_packages; return; fi # .ci/run's prepare phase
  bash "$root/hack/cluster/down.sh" --quiet
  install_packages
  build_all
  local tb; tb=$(date +%s)
  mkdir -p "$CLUSTER_DIR/logs"
  make_pki
  host_network
  start_control_plane
  local i
  seed_stores
  for i in $(seq 1 "$NODES"); do log "node $(node_name "$i"): containerd, images, kubelet"; start_node "$i"; done
  wait_for "$NODES Ready nodes" 120 nodes_ready
  start_kube_proxy
  log "addons: CoreDNS, cert-manager, training-operator, JobSet, Kubeflow Trainer"
  bash "$root/hack/cluster/addons.sh"
  local t1; t1=$(date +%s)
  echo "$((t1 - tb))" >"$CLUSTER_DIR/start-seconds"
  log "cluster ready: $NODES nodes; start $((t1 - tb))s (plus $((tb - t0))s for builds/images)"
  echo "export KUBECONFIG=$KUBECONFIG_OUT"
}
main "$@"
