# Certificates and kubeconfigs of the local cluster (sourced by up.sh).
# One CA signs everything: serving certs, client certs (CN = user, O = group).
# shellcheck shell=bash

# mkcert NAME CN [O] [SANS]: client/server certificate signed by the cluster CA.
mkcert() {
  local name=$1 cn=$2 o=${3:-} sans=${4:-} d=$CLUSTER_DIR/pki subj
  subj="/CN=$cn"; [ -n "$o" ] && subj="/O=$o$subj"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$d/$name.key" -out "$d/$name.csr" -subj "$subj" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -n "$sans" ] && echo "subjectAltName=$sans"
  } >"$d/$name.ext"
  openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 30 -extfile "$d/$name.ext" -out "$d/$name.crt" 2>/dev/null
  rm -f "$d/$name.csr" "$d/$name.ext"
}

# mkkubeconfig NAME CERT: kubeconfig for the client certificate CERT.
mkkubeconfig() {
  local name=$1 cert=$2 d=$CLUSTER_DIR/pki
  cat >"$CLUSTER_DIR/$name.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: trainguard-e2e
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $d/ca.crt
users:
- name: $name
  user:
    client-certificate: $d/$cert.crt
    client-key: $d/$cert.key
contexts:
- name: trainguard-e2e
  context: {cluster: trainguard-e2e, user: $name}
current-context: trainguard-e2e
KC
}

make_pki() {
  local d=$CLUSTER_DIR/pki ip i
  ip=$(host_ip)
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 30 \
    -subj "/CN=trainguard-e2e-ca" 2>/dev/null
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  mkcert apiserver kube-apiserver "" \
    "IP:127.0.0.1,IP:$ip,IP:$KUBERNETES_SVC_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  mkcert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  mkcert admin trainguard-e2e-admin system:masters
  mkcert controller-manager system:kube-controller-manager
  mkcert scheduler system:kube-scheduler
  mkcert kube-proxy system:kube-proxy
  mkkubeconfig admin admin
  mkkubeconfig controller-manager controller-manager
  mkkubeconfig scheduler scheduler
  mkkubeconfig kube-proxy kube-proxy
  for i in $(seq 1 "$NODES"); do
    mkcert "node-$i" "system:node:$(node_name "$i")" system:nodes "IP:$ip,DNS:$(node_name "$i")"
    mkkubeconfig "node-$i" "node-$i"
  done
  cp "$CLUSTER_DIR/admin.kubeconfig" "$KUBECONFIG_OUT"
}
