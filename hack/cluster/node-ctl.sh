#!/usr/bin/env bash
# node-ctl.sh kill|start|freeze|thaw I: what the e2e scenarios do to node I.
#   kill:   a node's death, not a partition: SIGKILL its kubelet, its containerd,
#           every shim and every container process in its cgroups.
#   start:  bring it back (containerd, then kubelet; images are still imported).
#   freeze: a partition or a hung kubelet: SIGSTOP the kubelet only; its
#           containers keep running and reach the other pods and the claim.
#   thaw:   SIGCONT the kubelet.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/node.sh"
action=${1:?usage: $0 kill|start|freeze|thaw NODE_INDEX}; i=${2:?usage: $0 kill|start|freeze|thaw NODE_INDEX}
case "$i" in [1-9]) ;; *) die "node index must be 1-9, got $i" ;; esac
case "$action" in
  kill)
    kill_node "$i" || true; log "node $(node_name "$i") killed" ;;
  start) start_node "$i"; log "node $(node_name "$i") started" ;;
  freeze|thaw)
    sig=STOP; [ "$action" = thaw ] && sig=CONT
    pid=$(cat "$CLUSTER_DIR/pids/kubelet-$i.pid") || die "no kubelet pid for node $i"
    kill -"$sig" "$pid" || die "kill -$sig kubelet-$i ($pid)"
    log "node $(node_name "$i"): kubelet ${action}d (SIG$sig $pid)" ;;
  *) die "unknown action $action (kill|start|freeze|thaw)" ;;
esac
