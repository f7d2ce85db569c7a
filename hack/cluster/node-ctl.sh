#!/usr/bin/env bash
# node-ctl.sh kill|start|freeze|thaw I: what the e2e scenarios do to node I.
#   kill:   a node's death, not a partition: SIGKILL its kubelet, its containerd,
#           every shim and every container process in its cgroups.
#   start:  bring it back (containerd, then kubelet; images are still imported).
#   freeze: a partition: SIGSTOP the kubelet and drop every packet to or from
#           the node's pods (cut_node); its containers keep running and keep
#           their claim, as a partitioned machine's do, but reach no peer.
#   thaw:   the partition heals: the node's pods' traffic flows, then SIGCONT
#           the kubelet. start also heals a partition the node died in.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/node.sh"
action=${1:?usage: $0 kill|start|freeze|thaw NODE_INDEX}; i=${2:?usage: $0 kill|start|freeze|thaw NODE_INDEX}
case "$i" in [1-9] | 1[0-9] | 20) ;; *) die "node index must be 1-$MAX_NODES, got $i" ;; esac
case "$action" in
  kill)
    kill_node "$i" || true; log "node $(node_name "$i") killed" ;;
  start) heal_node "$i"; start_node "$i"; log "node $(node_name "$i") started" ;;
  freeze|thaw)
    sig=STOP; [ "$action" = thaw ] && sig=CONT
    pid=$(cat "$CLUSTER_DIR/pids/kubelet-$i.pid") || die "no kubelet pid for node $i"
    # Frozen first, then cut: the kubelet starts no pod the cut would miss.
    [ "$action" = thaw ] && heal_node "$i"
    kill -"$sig" "$pid" || die "kill -$sig kubelet-$i ($pid)"
    [ "$action" = freeze ] && cut_node "$i"
    log "node $(node_name "$i"): kubelet ${action}d (SIG$sig $pid)" ;;
  *) die "unknown action $action (kill|start|freeze|thaw)" ;;
esac
