#!/usr/bin/env bash
# goodput-hook.sh: the local cluster's node hook for `make goodput` and the
# goodput e2e scenario (docs/goodput.md, "Hooks"). Another cluster writes its
# own script with the same commands:
#   crash NODE       the node dies (kubelet, runtime and containers gone)
#   restore NODE     it comes back (the harness waits until it is Ready)
#   partition NODE   its kubelet stops reporting and its pods' traffic is
#                    dropped; its containers keep running (and their claim)
#   heal NODE        traffic flows and the kubelet reports again
#   claim NS CLAIM   a ReadWriteMany claim CLAIM in namespace NS, mountable on every node
# Node disruptions are node-ctl.sh's (the e2e scenarios' own).
set -euo pipefail
here=$(dirname "$0")
. "$here/lib.sh"
usage="usage: $0 crash|restore|partition|heal NODE | claim NAMESPACE CLAIM"
action=${1:?$usage}
index() { # tg-node-I → I
  case "$1" in "$NODE_PREFIX"[1-9] | "$NODE_PREFIX"1[0-9] | "$NODE_PREFIX"20) echo "${1#"$NODE_PREFIX"}" ;; *) die "not a node of this cluster: $1" ;; esac
}
case "$action" in
  crash) bash "$here/node-ctl.sh" kill "$(index "${2:?$usage}")" ;;
  restore) bash "$here/node-ctl.sh" start "$(index "${2:?$usage}")" ;;
  partition) bash "$here/node-ctl.sh" freeze "$(index "${2:?$usage}")" ;;
  heal) bash "$here/node-ctl.sh" thaw "$(index "${2:?$usage}")" ;;
  claim)
    ns=${2:?$usage}; claim=${3:?$usage}
    case "$ns$claim" in *[!a-z0-9-]*) die "namespace and claim must be DNS labels: $ns $claim" ;; esac
    # The nodes are one machine: a hostPath PV is shared by all of them.
    # Each run's claim starts empty, on a volume of its own: an earlier
    # run's volume (Retain: Released once its namespace went) would never
    # bind again, and its checkpoints would be resumed from.
    dir=$CLUSTER_DIR/pv/$ns
    "$CLUSTER_BIN/kubectl" delete pv "goodput-$ns" --ignore-not-found --wait=true >/dev/null
    rm -rf "$dir" && mkdir -p "$dir" && chmod 0777 "$dir"
    "$CLUSTER_BIN/kubectl" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: goodput-$ns}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: e2e-hostpath
  claimRef: {namespace: $ns, name: $claim}
  hostPath: {path: $dir, type: Directory}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $claim, namespace: $ns}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: e2e-hostpath
  volumeName: goodput-$ns
  resources: {requests: {storage: 1Gi}}
YAML
    ;;
  *) die "unknown action $action ($usage)" ;;
esac
