#!/usr/bin/env bash
# node-ctl.sh kill|start I: what the e2e node-crash scenario does to node I.
#   kill:  a node's death, not a partition: SIGKILL its kubelet, its containerd,
#          every shim and every container process in its cgroups.
#   start: bring it back (containerd, then kubelet; images are still imported).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/node.sh"
action=${1:?usage: $0 kill|start NODE_INDEX}; i=${2:?usage: $0 kill|start NODE_INDEX}
case "$i" in [1-9]) ;; *) die "node index must be 1-9, got $i" ;; esac
case "$action" in
  kill)
    kill_node "$i" || true; log "node $(node_name "$i") killed" ;;
  start) start_node "$i"; log "node $(node_name "$i") started" ;;
  *) die "unknown action $action (kill|start)" ;;
esac
