#!/usr/bin/env bash
# Cluster add-ons of `make cluster`, as pods from the locally built images:
# CoreDNS, cert-manager v1.11.5 (its own chart and CRDs, read from the Go
# module cache and rendered with helm) and the kubeflow training-operator
# v1.9.4 (its own kustomize manifests, from the module cache), and Kubeflow
# Trainer v2 with JobSet (each with its own webhooks and self-managed
# certificates, their own kustomize manifests from the module cache), and
# Kueue (its own kustomize manifests from the module cache, its own webhook
# and internally rotated certificate, the PyTorchJob and TrainJob
# integrations) with the preemption scenarios' ClusterQueue. All pinned to
# the infra node. Waits until each is available.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
kc() { "$CLUSTER_BIN/kubectl" --kubeconfig "$KUBECONFIG_OUT" "$@"; }
helm=$root/bin/helm
modcache=$(go env GOMODCACHE)
work=$CLUSTER_DIR/addons
mkdir -p "$work"
infra_sched='{"e2e.trainguard.io/infra":"true"}'
infra_tol='[{"key":"e2e.trainguard.io/infra","operator":"Exists","effect":"NoSchedule"}]'

no_pulls() {
  kc apply -f "$root/hack/cluster/manifests/no-pulls.yaml" >/dev/null
}

coredns() {
  sed "s/__DNS_SVC_IP__/$DNS_SVC_IP/" "$root/hack/cluster/manifests/coredns.yaml" | kc apply -f - >/dev/null
}

cert_manager() {
  local src=$modcache/github.com/cert-manager/cert-manager@v1.11.5/deploy c=$work/cert-manager
  [ -d "$src" ] || (cd "$root/hack/tools/cert-manager" && go mod download github.com/cert-manager/cert-manager)
  rm -rf "$c"; cp -r "$src/charts/cert-manager" "$c"; chmod -R u+w "$c"
  sed -e 's/v0.1.0/v1.11.5/' -e 's/{{IS_PRERELEASE}}/false/' "$c/Chart.template.yaml" >"$c/Chart.yaml"
  cp "$src"/crds/crd-*.yaml "$c/templates/"
  local img=localhost/cert-manager
  "$helm" template cert-manager "$c" --namespace cert-manager --kube-version "${CLUSTER_KUBE_VERSION#v}" \
    --set image.repository=$img-controller,image.tag=$IMAGE_TAG,image.pullPolicy=Never \
    --set webhook.image.repository=$img-webhook,webhook.image.tag=$IMAGE_TAG,webhook.image.pullPolicy=Never \
    --set cainjector.image.repository=$img-cainjector,cainjector.image.tag=$IMAGE_TAG,cainjector.image.pullPolicy=Never \
    --set startupapicheck.enabled=false --set-json "nodeSelector=$infra_sched" --set-json "tolerations=$infra_tol" \
    --set-json "webhook.nodeSelector=$infra_sched" --set-json "webhook.tolerations=$infra_tol" \
    --set-json "cainjector.nodeSelector=$infra_sched" --set-json "cainjector.tolerations=$infra_tol" \
    >"$work/cert-manager.yaml"
  kc create namespace cert-manager --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc apply --server-side -f "$work/cert-manager.yaml" >/dev/null
}

training_operator() {
  local src=$modcache/github.com/kubeflow/training-operator@v1.9.4/manifests k=$work/training-operator
  [ -d "$src" ] || (cd /tmp && GOFLAGS=-mod=mod go mod download github.com/kubeflow/training-operator@v1.9.4)
  # kustomize takes relative paths only: work on a copy of the upstream manifests.
  rm -rf "$k"; mkdir -p "$k"; cp -r "$src" "$k/upstream"; chmod -R u+w "$k/upstream"
  cat >"$k/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: kubeflow
resources: [upstream/overlays/standalone]
images: [{name: ghcr.io/kubeflow/training-v1/training-operator, newName: localhost/training-operator, newTag: $IMAGE_TAG}]
patches:
- target: {kind: Deployment, name: training-operator}
  patch: |
    - {op: add, path: /spec/template/spec/nodeSelector, value: $infra_sched}
    - {op: add, path: /spec/template/spec/tolerations, value: $infra_tol}
    - {op: add, path: /spec/template/spec/containers/0/imagePullPolicy, value: Never}
    - {op: add, path: /spec/template/spec/containers/0/args, value: ["--pytorch-init-container-image=localhost/pytorch:$IMAGE_TAG"]}
    - {op: add, path: /spec/template/spec/volumes/-, value: {name: init-template, configMap: {name: pytorch-init-container}}}
    - {op: add, path: /spec/template/spec/containers/0/volumeMounts/-, value: {name: init-template, mountPath: /etc/config, readOnly: true}}
configMapGenerator:
- name: pytorch-init-container
  options: {disableNameSuffixHash: true}
  files: [initContainer.yaml]
YAML
  cp "$root/hack/cluster/manifests/pytorch-init-container.yaml" "$k/initContainer.yaml"
  kc kustomize "$k" >"$work/training-operator.yaml"
  kc apply --server-side -f "$work/training-operator.yaml" >/dev/null
}

# infra_patch DEPLOYMENT IMAGE: the JSON patch that pins a controller to the
# infra node, uses the local image and asks for little CPU (the nodes share 2 cores).
infra_patch() {
  cat <<YAML
- target: {kind: Deployment, name: $1}
  patch: |
    - {op: add, path: /spec/template/spec/nodeSelector, value: $infra_sched}
    - {op: add, path: /spec/template/spec/tolerations, value: $infra_tol}
    - {op: replace, path: /spec/template/spec/containers/0/image, value: "localhost/$2:$IMAGE_TAG"}
    - {op: add, path: /spec/template/spec/containers/0/imagePullPolicy, value: Never}
    - {op: add, path: /spec/template/spec/containers/0/resources, value: {requests: {cpu: 20m, memory: 64Mi}}}
YAML
}

# upstream MODULE@VERSION SUBDIR DEST: a writable copy of a module's manifests
# (kustomize takes relative paths only).
upstream() {
  local dir
  dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/$2" ] || die "$1 has no $2"
  rm -rf "$3"; mkdir -p "$3"; cp -r "$dir/$2" "$3/upstream"; chmod -R u+w "$3/upstream"
}

jobset() {
  local k=$work/jobset
  upstream "sigs.k8s.io/jobset@$JOBSET_VERSION" config "$k"
  {
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources: [upstream/default]"
    echo "patches:"
    infra_patch jobset-controller-manager jobset-controller
  } >"$k/kustomization.yaml"
  kc kustomize "$k" >"$work/jobset.yaml"
  kc apply --server-side -f "$work/jobset.yaml" >/dev/null
}

# Trainer's own overlay pulls JobSet from a URL; this one lists its parts and
# uses the JobSet above. The torch-distributed ClusterTrainingRuntime it ships
# gets the local PyTorch image (TrainJobs override it anyway).
trainer() {
  local k=$work/trainer
  upstream "github.com/kubeflow/trainer/v2@$TRAINER_VERSION" manifests "$k"
  {
    cat <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: kubeflow-system
resources: [upstream/base/crds, upstream/base/manager, upstream/base/rbac, upstream/base/webhook]
secretGenerator:
- {name: kubeflow-trainer-webhook-cert, namespace: kubeflow-system, options: {disableNameSuffixHash: true}}
configMapGenerator:
- {name: kubeflow-trainer-public, literals: [kubeflow_trainer_version=$TRAINER_VERSION], options: {disableNameSuffixHash: true}}
patches:
YAML
    infra_patch kubeflow-trainer-controller-manager trainer-controller-manager
  } >"$k/kustomization.yaml"
  kc create namespace kubeflow-system --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc kustomize "$k" >"$work/trainer.yaml"
  kc apply --server-side -f "$work/trainer.yaml" >/dev/null
  sed -e "s|image: pytorch/pytorch:.*|image: $TRAINER_IMAGE\n                      imagePullPolicy: Never|" \
    "$k/upstream/base/runtimes/torch_distributed.yaml" >"$work/torch-distributed.yaml"
}

# Kueue's own default overlay with: the local image on the infra node, little
# CPU, our manager configuration (hack/cluster/manifests/kueue-config.yaml:
# only queue-labelled jobs, PyTorchJob + TrainJob), PriorityBoost on (the
# checkpoint-aware preemption; gates go on the command line only: Kueue
# refuses them in both places), and without the
# visibility APIServices (an aggregated API that is not served would break
# discovery, and with it namespace deletion, for the whole cluster).
# FailureRecoveryPolicy (alpha, off by default) is on for the goodput
# scenario's Kueue arm: it acts only on pods annotated
# kueue.x-k8s.io/safe-to-forcefully-delete (docs/goodput.md).
kueue() {
  local k=$work/kueue
  upstream "sigs.k8s.io/kueue@$KUEUE_VERSION" config "$k"
  cp "$root/hack/cluster/manifests/kueue-config.yaml" "$k/controller_manager_config.yaml"
  {
    cat <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [upstream/default]
configMapGenerator:
- {name: kueue-manager-config, namespace: kueue-system, behavior: replace, files: [controller_manager_config.yaml]}
patches:
- target: {kind: APIService}
  patch: |
    \$patch: delete
    apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: any}
- target: {kind: Deployment, name: kueue-controller-manager}
  patch: |
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--feature-gates=VisibilityOnDemand=false,FailureRecoveryPolicy=true,PriorityBoost=true"}
YAML
    infra_patch kueue-controller-manager kueue | sed 's/requests: {cpu: 20m, memory: 64Mi}/requests: {cpu: 20m, memory: 128Mi}, limits: {memory: 512Mi}/'
  } >"$k/kustomization.yaml"
  kc kustomize "$k" >"$work/kueue.yaml"
  kc apply --server-side -f "$work/kueue.yaml" >/dev/null
}

kueue_queues() { # after Kueue's webhook serves: it validates its objects
  local i
  for i in $(seq 1 60); do
    kc apply --server-side -f "$root/hack/cluster/manifests/kueue-queues.yaml" >/dev/null 2>&1 && return
    sleep 2
  done
  kc apply --server-side -f "$root/hack/cluster/manifests/kueue-queues.yaml"
}

trainer_runtime() { # after Trainer's webhook serves: it validates runtimes
  local i
  for i in $(seq 1 60); do
    kc apply --server-side -f "$work/torch-distributed.yaml" >/dev/null 2>&1 && return
    sleep 2
  done
  kc apply --server-side -f "$work/torch-distributed.yaml"
}

# explain NAMESPACE: why the namespace's pods are not ready, in few enough
# lines that a CI log's tail still shows it: each unready pod's node, phase,
# waiting or last-terminated reason, its latest Events and log lines, and the
# nodes' Ready conditions.
explain() {
  local ns=$1 p
  log "  nodes: $(kc get nodes --no-headers -o custom-columns=N:.metadata.name,R:'.status.conditions[?(@.type=="Ready")].status' | tr -s ' \n' '= ' )"
  for p in $(kc -n "$ns" get pods -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    grep -v '=True$' | cut -d= -f1); do
    log "  pod $ns/$p: $(kc -n "$ns" get pod "$p" -o jsonpath='node={.spec.nodeName} phase={.status.phase} waiting={.status.containerStatuses[0].state.waiting.reason}:{.status.containerStatuses[0].state.waiting.message} lastExit={.status.containerStatuses[0].lastState.terminated.exitCode} restarts={.status.containerStatuses[0].restartCount} conditions={range .status.conditions[*]}{.type}={.status}/{.reason} {end}')"
    kc -n "$ns" get events --field-selector "involvedObject.name=$p" --sort-by=.lastTimestamp \
      -o custom-columns=R:.reason,M:.message --no-headers 2>/dev/null | tail -4 | sed 's/^/      event: /' | cut -c1-240 || true
    kc -n "$ns" logs "$p" --all-containers --tail=4 2>&1 | sed 's/^/      log: /' | cut -c1-240 || true
  done
  return 0 # a diagnosis never stops the caller
}

# available NAMESPACE DEPLOYMENT...: wait until each deployment is available.
# An add-on that does not come up in 5 minutes is explained (explain), its
# pods are recreated once (a pod that lost a start-up race with the node's
# network or the API server's service address comes up on a second try; CI
# saw CoreDNS stay unready once), and only a second failure stops the start.
available() {
  local ns=$1; shift
  kc -n "$ns" wait --for=condition=Available --timeout="${ADDON_TIMEOUT:-300}s" "${@/#/deployment/}" >/dev/null && return
  log "  deployments $* in $ns not available after ${ADDON_TIMEOUT:-300} s; why:"
  explain "$ns"
  log "  recreating their pods once"
  kc -n "$ns" rollout restart "${@/#/deployment/}" >/dev/null
  kc -n "$ns" wait --for=condition=Available --timeout="$(( ${ADDON_TIMEOUT:-300} * 3 / 5 ))s" "${@/#/deployment/}" >/dev/null && {
    log "  deployments $* in $ns available after their pods were recreated"
    return
  }
  explain "$ns"
  die "deployments $* in $ns not available (twice; the reasons above); kubectl -n $ns describe pods"
}

no_pulls
coredns
cert_manager
training_operator
jobset
trainer
kueue
available kube-system coredns
log "  CoreDNS available"
available cert-manager cert-manager cert-manager-cainjector cert-manager-webhook
log "  cert-manager available"
available kubeflow training-operator
log "  training-operator available"
available jobset-system jobset-controller-manager
available kubeflow-system kubeflow-trainer-controller-manager
trainer_runtime
log "  JobSet $JOBSET_VERSION, Trainer $TRAINER_VERSION available (ClusterTrainingRuntime torch-distributed)"
available kueue-system kueue-controller-manager
kueue_queues
log "  Kueue $KUEUE_VERSION available (ClusterQueue training, WorkloadPriorityClasses training-low/high)"
