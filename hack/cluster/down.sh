#!/usr/bin/env bash
# `make cluster-down`: stops everything hack/cluster/up.sh started and removes
# what it made: processes (control plane, kubelets, containerds, shims and
# every container process in the nodes' cgroups), mounts, cgroups, network
# namespaces, the bridge and dummy interface, kube-proxy's and our iptables
# chains, and the runtime directory. Safe to run any number of times, also
# after a failed or interrupted `make cluster`. --quiet: no summary line.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/node.sh"
quiet=${1:-}

unmount_under() { # PREFIX: unmount every mount below it, deepest first
  local m
  awk '{print $5}' /proc/self/mountinfo | grep "^$1/" | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
}

remove_cgroups() {
  local i=$1 c
  for c in /sys/fs/cgroup/*/"$CGROUP_PREFIX$i"; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
  done
}

cleanup_network() {
  local ns
  # Network namespaces our containerds made (cni-*) and no process uses any more.
  for ns in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do
    [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && ip netns delete "$ns" 2>/dev/null
  done
  ip link del "$BRIDGE" 2>/dev/null
  ip link del "$SVC_DUMMY" 2>/dev/null
  [ -x "$CLUSTER_BIN/kube-proxy" ] && "$CLUSTER_BIN/kube-proxy" --cleanup >/dev/null 2>&1
  iptables -w -D FORWARD -j "$FW_CHAIN" 2>/dev/null
  iptables -w -F "$FW_CHAIN" 2>/dev/null; iptables -w -X "$FW_CHAIN" 2>/dev/null
  local c
  for c in FORWARD INPUT OUTPUT; do
    while iptables -w -D "$c" -j "$PARTITION_CHAIN" 2>/dev/null; do :; done
  done
  iptables -w -F "$PARTITION_CHAIN" 2>/dev/null; iptables -w -X "$PARTITION_CHAIN" 2>/dev/null
  local t ch
  for t in filter nat mangle; do # leftovers kube-proxy --cleanup keeps (KUBE-FIREWALL, canaries)
    for ch in $(iptables -w -t "$t" -S 2>/dev/null | awk '/^-N KUBE-/{print $2}'); do
      iptables -w -t "$t" -S 2>/dev/null | awk -v c="$ch" '$1=="-A" && $0 ~ "-j "c"( |$)" {sub("^-A","-D"); print}' |
        while read -r rule; do eval "iptables -w -t $t $rule" 2>/dev/null; done
    done
    for ch in $(iptables -w -t "$t" -S 2>/dev/null | awk '/^-N KUBE-/{print $2}'); do iptables -w -t "$t" -F "$ch" 2>/dev/null; done
    for ch in $(iptables -w -t "$t" -S 2>/dev/null | awk '/^-N KUBE-/{print $2}'); do iptables -w -t "$t" -X "$ch" 2>/dev/null; done
  done
  if [ -f "$CLUSTER_DIR/sysctl.saved" ]; then
    while read -r kv; do sysctl -qw "$kv" 2>/dev/null; done <"$CLUSTER_DIR/sysctl.saved"
  fi
}

main() {
  local i
  [ -d "$CLUSTER_DIR" ] || [ -n "$(ls -d /sys/fs/cgroup/*/"$CGROUP_PREFIX"* 2>/dev/null)" ] || ip link show "$BRIDGE" >/dev/null 2>&1 ||
    { [ -z "$quiet" ] && log "nothing to remove"; return 0; }
  for i in $(seq 1 "$MAX_NODES"); do kill_node "$i"; done
  # SIGKILL: the state is thrown away, and kube-apiserver may ignore SIGTERM for minutes.
  for n in kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd; do kill_pidfile "$n" KILL; done
  if [ -d "$CLUSTER_DIR/pids" ]; then # anything else recorded (e.g. port-forwards of the harness)
    for f in "$CLUSTER_DIR"/pids/*.pid; do [ -f "$f" ] && kill_pidfile "$(basename "$f" .pid)" KILL; done
  fi
  sleep 0.5
  unmount_under "$CLUSTER_DIR"
  unmount_under "$CLUSTER_CACHE"
  for i in $(seq 1 "$MAX_NODES"); do remove_cgroups "$i"; done
  cleanup_network
  cleanup_network_done=1
  rm -rf --one-file-system "$CLUSTER_DIR"
  [ -z "$quiet" ] && log "cluster removed (image stores kept in $CLUSTER_CACHE; make cluster-clean removes them)"
  return 0
}
main
