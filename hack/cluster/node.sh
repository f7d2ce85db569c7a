# One node of the local cluster: its own containerd (root, state, socket) and
# its own kubelet (root dir, ports, cgroupRoot), so nodes never see each
# other's containers as orphans. Sourced by up.sh and by the e2e harness's
# node-restart helper (hack/cluster/node-start.sh).
# shellcheck shell=bash

start_proc() { # NAME LOGFILE CMD...: start detached, record the pid
  local name=$1 logf=$2; shift 2
  mkdir -p "$CLUSTER_DIR/pids" "$(dirname "$logf")"
  setsid "$@" >>"$logf" 2>&1 </dev/null &
  echo $! >"$CLUSTER_DIR/pids/$name.pid"
}

node_cgroups() { # create /sys/fs/cgroup/<controller>/tg-node-<i> (cgroup v1 + unified)
  local i=$1 c dir
  for c in /sys/fs/cgroup/*/; do
    c=${c%/}
    [ -f "$c/cgroup.procs" ] || continue
    dir=$c/$CGROUP_PREFIX$i
    mkdir -p "$dir"
    if [ -f "$c/cpuset.cpus" ]; then
      cat "$c/cpuset.cpus" >"$dir/cpuset.cpus"; cat "$c/cpuset.mems" >"$dir/cpuset.mems"
    fi
  done
}

containerd_config() {
  local i=$1 d; d=$(node_dir "$i")
  mkdir -p "$d/cni" "$CLUSTER_CACHE/containerd-$i"
  cat >"$d/containerd.toml" <<TOML
version = 2
# Image store in the cache (persists across runs); everything live under $d.
root = "$CLUSTER_CACHE/containerd-$i"
state = "$d/containerd-state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$(node_sock "$i")"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:$IMAGE_TAG"
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails in runc.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "$((KUBELET_PORT_BASE + 40 + i))"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
TOML
  # All nodes share one bridge and one host-local range (one machine); no
  # masquerade: pods only talk to each other and to this host.
  cat >"$d/cni/10-trainguard-e2e.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "$CNI_NET", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$CLUSTER_DIR/cni-ipam",
            "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}}
]}
JSON
}

kubelet_config() {
  local i=$1 d; d=$(node_dir "$i")
  mkdir -p "$d/kubelet" "$d/pod-logs"
  cat >"$d/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: $((KUBELET_PORT_BASE + i))
healthzPort: $((KUBELET_PORT_BASE + 20 + i))
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $CLUSTER_DIR/pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_PREFIX$i
failCgroupV1: false
failSwapOn: false
enforceNodeAllocatable: []
makeIPTablesUtilChains: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
clusterDNS: [$DNS_SVC_IP]
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: $d/pod-logs
containerRuntimeEndpoint: unix://$(node_sock "$i")
serializeImagePulls: false
# Secret volumes (webhook certificates issued after the pod started) are
# refreshed on each pod sync: every 10 s instead of every minute.
syncFrequency: 10s
YAML
}

start_node() { # i: containerd, images, kubelet
  local i=$1 d; d=$(node_dir "$i")
  node_cgroups "$i"
  containerd_config "$i"
  kubelet_config "$i"
  start_proc "containerd-$i" "$CLUSTER_DIR/logs/containerd-$i.log" containerd --config "$d/containerd.toml"
  wait_containerd "$i"
  prune_store "$i"
  import_images "$i"
  local taints="" labels="e2e.trainguard.io/node=$i"
  # Node 1 keeps the cluster's own services (DNS, cert-manager, operator,
  # trainguard) away from the nodes the scenarios drain and kill.
  if [ "$i" = 1 ]; then taints="e2e.trainguard.io/infra=true:NoSchedule"; labels="$labels,e2e.trainguard.io/infra=true"; fi
  start_proc "kubelet-$i" "$CLUSTER_DIR/logs/kubelet-$i.log" "$CLUSTER_BIN/kubelet" \
    --config "$d/kubelet.yaml" --kubeconfig "$CLUSTER_DIR/node-$i.kubeconfig" \
    --root-dir "$d/kubelet" --hostname-override "$(node_name "$i")" --node-ip "$(host_ip)" \
    --node-labels "$labels" ${taints:+--register-with-taints "$taints"} --v=2
}

# prune_store i: the node's persistent image store keeps the images, but
# not the previous run's containers: their snapshots (the writable layers
# of every training container the scenarios ran) are gigabytes a new
# cluster, with an empty etcd, never uses. Removed before the kubelet starts,
# so the kubelet sees no orphans either.
prune_store() {
  local i=$1 sock before c n=0; sock=$(node_sock "$i")
  before=$(du -sm "$CLUSTER_CACHE/containerd-$i" 2>/dev/null | cut -f1)
  for c in $(ctr -a "$sock" -n k8s.io containers ls -q 2>/dev/null); do
    ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
    ctr -a "$sock" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1 || true
    ctr -a "$sock" -n k8s.io containers delete "$c" >/dev/null 2>&1 && n=$((n + 1))
  done
  [ "$n" = 0 ] || log "node $i: removed $n containers of an earlier run (store ${before:-?} MB → $(du -sm "$CLUSTER_CACHE/containerd-$i" | cut -f1) MB)"
}

# import_images i: every tarball in bin/cluster/images, skipped when the node's
# (persistent) image store already holds that exact tarball: its stamp says
# so and the store still lists the image. The stamp alone was trusted once
# and a node's store had lost localhost/pause:e2e: every pod sandbox there
# failed (FailedCreatePodSandBox) though the stamp said imported.
import_images() {
  local i=$1 sock t stampf have; sock=$(node_sock "$i")
  have=$(ctr -a "$sock" -n k8s.io images ls -q 2>/dev/null || true)
  for t in "$CLUSTER_BIN"/images/*.tar; do
    # Training pods never run on the infra node: spare it the 1.3 GB PyTorch image.
    [ "$i" = 1 ] && [ "$(basename "$t")" = pytorch.tar ] && continue
    stampf="$CLUSTER_CACHE/containerd-$i/imported-$(basename "$t").stamp"
    if [ "$(cat "$stampf" 2>/dev/null)" = "$(stat -c '%s %Y' "$t")" ] &&
      grep -qx "localhost/$(basename "$t" .tar):$IMAGE_TAG" <<<"$have"; then continue; fi
    ctr -a "$sock" -n k8s.io images import "$t" >/dev/null ||
      die "import $t into node $i failed; $(df -h --output=avail "$CLUSTER_CACHE" | tail -1 | tr -d ' ') left on \
the file system of $CLUSTER_CACHE (each training node's store takes about 3 GB, half of it PyTorch's \
unpacked layers; make cluster-clean removes every store)"
    stat -c '%s %Y' "$t" >"$stampf"
  done
}

# ---- stopping (down.sh, node-ctl.sh kill) ----

kill_pidfile() { # NAME [SIG]: kill the recorded process, SIGKILL after 10 s
  local f=$CLUSTER_DIR/pids/$1.pid pid n=0
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "-${2:-TERM}" "$pid" 2>/dev/null
    # kube-apiserver may ignore SIGTERM for over a minute with nodes attached.
    while kill -0 "$pid" 2>/dev/null && [ $n -lt 50 ]; do sleep 0.2; n=$((n + 1)); done
    kill -KILL "$pid" 2>/dev/null || true # gone already: fine (up.sh runs with -e)
  fi
  rm -f "$f"
}

# cgroup_pids i: every process in node i's cgroup tree (its pods' containers).
cgroup_pids() {
  local c
  for c in /sys/fs/cgroup/pids /sys/fs/cgroup/memory /sys/fs/cgroup/cpu; do
    [ -d "$c/$CGROUP_PREFIX$1" ] && find "$c/$CGROUP_PREFIX$1" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u
}

# shim_pids SOCK: containerd-shim processes serving the containerd at SOCK
# (one grep over every command line; the socket path is unique to this cluster).
shim_pids() {
  local p
  # Arguments are NUL-separated in cmdline: match the socket path, then the binary.
  for p in $(grep -l -a -F -- "$1" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    case "$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")" in *containerd-shim*) echo "$p" ;; esac
  done
}

kill_node() { # i: kubelet, containerd, shims, container processes
  local i=$1 pid
  [ -f "$CLUSTER_DIR/pids/kubelet-$i.pid" ] || [ -f "$CLUSTER_DIR/pids/containerd-$i.pid" ] ||
    [ -d "/sys/fs/cgroup/pids/$CGROUP_PREFIX$i" ] || [ -S "$(node_sock "$i")" ] || return 0
  kill_pidfile "kubelet-$i" KILL
  kill_pidfile "containerd-$i" KILL
  for pid in $(cgroup_pids "$i") $(shim_pids "$(node_sock "$i")"); do kill -KILL "$pid" 2>/dev/null; done
}


# ---- image stores shared by hard links (up.sh) ----

# seed_stores: every training node's store is a hard-linked copy of node 2's.
# The images' content and unpacked layers are never written after import, so
# nine training nodes cost the disk of one (about 3 GB) instead of nine; each
# copy gets its own metadata databases (written by its own containerd) and
# stamps, and its containers' writable layers are its own.
seed_stores() {
  local t=2 i f src dst
  [ "$NODES" -ge 3 ] || return 0
  src=$CLUSTER_CACHE/containerd-$t
  containerd_config "$t"
  start_proc "containerd-$t" "$CLUSTER_DIR/logs/containerd-$t.log" containerd --config "$(node_dir "$t")/containerd.toml"
  wait_containerd "$t"
  prune_store "$t"
  import_images "$t"
  kill_pidfile "containerd-$t" # quiescent: its databases are copied next
  for i in $(seq 3 "$NODES"); do
    dst=$CLUSTER_CACHE/containerd-$i
    if [ -d "$dst" ] && diff -q <(cat "$src"/imported-*.stamp) <(cat "$dst"/imported-*.stamp 2>/dev/null) >/dev/null; then
      continue # same images: keep it (import_images still checks the store lists them)
    fi
    rm -rf --one-file-system "$dst"
    cp -al "$src" "$dst"
    # What a containerd writes in place must not be shared.
    while read -r f; do cp --remove-destination "$src/$f" "$dst/$f"; done < <(cd "$src" && find . -type f \( -name '*.db' -o -name '*.stamp' \))
    rm -f "$dst/io.containerd.grpc.v1.introspection/uuid"
    log "node $i: image store linked to node $t's"
  done
}

wait_containerd() { # i
  local i=$1 n=0 sock; sock=$(node_sock "$i")
  until [ -S "$sock" ] && ctr -a "$sock" version >/dev/null 2>&1; do
    n=$((n + 1)); [ $n -gt 100 ] && die "containerd-$i did not start; see $CLUSTER_DIR/logs/containerd-$i.log"
    sleep 0.2
  done
}

# ---- an honest partition (node-ctl.sh freeze/thaw) ----

# pod_ips i: the IPs of node i's pod sandboxes, from the node itself (its
# containerd's sandboxes and the shared host-local allocations), not from
# the API server's view.
pod_ips() {
  local i=$1 ids f id
  ids=$(ctr -a "$(node_sock "$i")" -n k8s.io containers ls -q 2>/dev/null) || return 0
  for f in "$CLUSTER_DIR/cni-ipam/$CNI_NET"/*.*.*.*; do
    [ -f "$f" ] || continue
    id=$(head -1 "$f" | tr -d '\r')
    if grep -qxF -- "$id" <<<"$ids"; then basename "$f"; fi
  done
  return 0 # callers run with -e: the last sandbox not being ours is no error
}

# cut_node i: drop every packet to or from node i's pods (forwarded between
# pods, to and from this host's services), as a partition does; the pods
# keep running and keep their claim (a hostPath on this machine). The IPs
# cut are recorded, so heal_node removes exactly those rules.
cut_node() {
  local i=$1 ip c rec=$CLUSTER_DIR/partitioned/$1
  mkdir -p "$CLUSTER_DIR/partitioned"
  pod_ips "$i" >"$rec"
  # kube-proxy started after up.sh made the jumps and put its own first,
  # with an ACCEPT of established connections: ours go back to the top.
  for c in FORWARD INPUT OUTPUT; do
    while iptables -w -D "$c" -j "$PARTITION_CHAIN" 2>/dev/null; do :; done
    iptables -w -I "$c" 1 -j "$PARTITION_CHAIN"
  done
  while read -r ip; do
    iptables -w -A "$PARTITION_CHAIN" -s "$ip" -j DROP
    iptables -w -A "$PARTITION_CHAIN" -d "$ip" -j DROP
  done <"$rec"
  log "node $(node_name "$i"): traffic of $(wc -l <"$rec") pod IP(s) dropped: $(tr '\n' ' ' <"$rec")"
}

heal_node() { # i: undo cut_node
  local i=$1 ip rec=$CLUSTER_DIR/partitioned/$1
  [ -f "$rec" ] || return 0
  while read -r ip; do
    iptables -w -D "$PARTITION_CHAIN" -s "$ip" -j DROP 2>/dev/null
    iptables -w -D "$PARTITION_CHAIN" -d "$ip" -j DROP 2>/dev/null
  done <"$rec"
  rm -f "$rec"
}
