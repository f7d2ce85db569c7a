{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "trainguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: the prefix of every resource, the Service name (so it must stay a
DNS label) and the name of both webhook configurations.
*/}}
{{- define "trainguard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "trainguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trainguard.labels" -}}
helm.sh/chart: {{ include "trainguard.chart" . }}
{{ include "trainguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "trainguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "trainguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trainguard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference; a digest pins it and wins over the tag. */}}
{{- define "trainguard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Secret holding tls.crt, tls.key and ca.crt, in both certificate modes. */}}
{{- define "trainguard.certSecretName" -}}
{{- printf "%s-tls" (include "trainguard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The leader-election Lease in the release namespace (Go
internal/foundations/contract.LeaderElectionID; the binary has no flag for
it): RBAC grants get and update on it by name, and the fence lets the
ServiceAccount create no other Lease. test/chart holds the two equal.
*/}}
{{- define "trainguard.leaderElectionID" -}}
trainguard.io
{{- end }}

{{/*
The name prefix of the rescheduler's bad-node records, ConfigMaps labelled
trainguard.io/bad-nodes=true in the release namespace (Go
contract.BadNodeRecordPrefix, contract.LabelBadNodes): the only ConfigMaps
the fence lets the ServiceAccount write.
*/}}
{{- define "trainguard.badNodeRecordPrefix" -}}
bad-nodes-
{{- end }}

{{/*
"true" when the binary writes Kueue's priority boost (config.priorityBoost.enabled,
which the configuration file carries), else empty: RBAC grants the Workload
patch, and the fence lets the account write the boost, only then.
*/}}
{{- define "trainguard.priorityBoostEnabled" -}}
{{- if ((.Values.config | default dict).priorityBoost | default dict).enabled }}true{{ end }}
{{- end }}

{{/*
The highest priority boost the binary writes: config.priorityBoost.maxBoost,
or when unset the binary's default (internal/config/v1alpha1
DefaultMaxBoost; test/chart holds the two equal). The fence refuses more.
*/}}
{{- define "trainguard.maxBoost" -}}
{{- $pb := (.Values.config | default dict).priorityBoost | default dict -}}
{{- if kindIs "invalid" $pb.maxBoost }}100{{ else }}{{ int64 $pb.maxBoost }}{{ end -}}
{{- end }}

{{/* The Certificate whose CA cert-manager injects into the webhook configurations. */}}
{{- define "trainguard.servingCertName" -}}
{{- printf "%s-serving-cert" (include "trainguard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trainguard.caCertName" -}}
{{- printf "%s-ca" (include "trainguard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trainguard.selfSignedIssuerName" -}}
{{- printf "%s-selfsigned" (include "trainguard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trainguard.caIssuerName" -}}
{{- printf "%s-ca" (include "trainguard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Namespaces never sent to trainguard: kube-system (the control plane must never
depend on trainguard), the release namespace (trainguard must never need
itself to start), then the user's list, and in cluster-wide mode the
namespaces of the cluster components (clusterWideExcludedNamespaces): there
nobody opted in, and trainguard's account may create pods wherever it
injects, so a component's namespace injected would let a stolen token run a
pod as that component's ServiceAccount. A YAML list. Other kube-* namespaces
are never injected either (internal/config Excluded, the admission policy),
but a label selector cannot say "kube-*".
*/}}
{{- define "trainguard.excludedNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace }}
{{- range .Values.excludedNamespaces }}
{{- $ns = append $ns . }}
{{- end }}
{{- if .Values.clusterWide }}
{{- range .Values.clusterWideExcludedNamespaces }}
{{- $ns = append $ns . }}
{{- end }}
{{- end }}
{{- toYaml (uniq $ns) }}
{{- end }}

{{/* The namespace-name half of every namespaceSelector. */}}
{{- define "trainguard.excludeExpression" -}}
- key: kubernetes.io/metadata.name
  operator: NotIn
  values:
    {{- include "trainguard.excludedNamespaces" . | nindent 4 }}
{{- end }}

{{/*
namespaceSelector of the job and pod webhooks. Opt-in mode matches only
namespaces whose opt-in annotation trainguard mirrored into the label, so a
namespace that never opted in is never sent to trainguard and never blocked
while it is down. Cluster-wide mode matches all but the opted-out ones.
*/}}
{{- define "trainguard.workloadNamespaceSelector" -}}
matchExpressions:
  {{- if .Values.clusterWide }}
  - key: trainguard.io/inject
    operator: NotIn
    values: [disabled]
  {{- else }}
  - key: trainguard.io/inject
    operator: In
    values: [enabled]
  {{- end }}
  {{- include "trainguard.excludeExpression" . | nindent 2 }}
{{- end }}

{{/*
failurePolicy of the job and pod webhooks: fail closed where users opted in
(their jobs must not start without the checkpoint hook), fail open when every
namespace is matched, and in audit mode, which must never block anything.
*/}}
{{- define "trainguard.workloadFailurePolicy" -}}
{{- if eq ((.Values.config | default dict).admissionMode | default "enforce") "audit" }}
{{- "Ignore" }}
{{- else if .Values.clusterWide }}
{{- .Values.webhook.clusterWideFailurePolicy }}
{{- else }}
{{- .Values.webhook.failurePolicy }}
{{- end }}
{{- end }}

{{/* Fields shared by every webhook entry. */}}
{{- define "trainguard.webhookCommon" -}}
admissionReviewVersions: [v1]
matchPolicy: Equivalent
sideEffects: None
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{- end }}

{{/* clientConfig of a webhook entry; the argument is (list $ "/path"). */}}
{{- define "trainguard.clientConfig" -}}
{{- $root := index . 0 -}}
clientConfig:
  service:
    name: {{ include "trainguard.fullname" $root }}
    namespace: {{ $root.Release.Namespace }}
    path: {{ index . 1 }}
    port: 443
{{- end }}

{{/* Annotations of both webhook configurations. */}}
{{- define "trainguard.webhookAnnotations" -}}
{{- if .Values.certManager.enabled -}}
annotations:
  # cert-manager's cainjector copies the serving Certificate's ca.crt into
  # every entry's caBundle. Without cert-manager, trainguard injects it itself.
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "trainguard.servingCertName" .) }}
{{- end }}
{{- end }}

{{/*
The training container names, as a list: config.trainingContainer.names (its
default in values.yaml is the Go default, internal/policy). The configuration
file and the pod matchConditions both read them from here, so the API server
never skips a pod the Go code would inject.
*/}}
{{- define "trainguard.trainingContainerNames" -}}
{{- $tc := .Values.config.trainingContainer | default dict -}}
{{- toYaml ($tc.names | default (list "pytorch" "ascend")) -}}
{{- end }}

{{/*
Kubeflow Trainer's trainer container (internal/foundations/apis/trainer/v1alpha1.Node):
the Go code adds it to the names for a JobSet pod of a TrainJob.
*/}}
{{- define "trainguard.trainerContainerName" -}}
node
{{- end }}

{{/*
The kinds trainguard handles besides pods, the one list the webhook entries
(webhooks.yaml, _trainer.tpl), the RBAC (rbac.yaml) and the fence
(admissionpolicy.yaml) are rendered from. It is internal/jobs.Builtin()'s,
which test/chart's TestChartKindsAreBuiltin holds it to. Fields:
  resource, group, version: the API; webhook: the entries' name prefix
    (the paths are /mutate-<group, dots as dashes>-<version>-<kind lowercased>
    and /validate-…, as webhook.MutatePath names them);
  mutate: trainguard injects its pod templates at its admission;
  trainer: Kubeflow Trainer's, rendered only with Trainer (_trainer.tpl);
  patched: the rescheduler reads its policy annotations and marks it at the
    reschedule cap (RBAC get and patch; the fence lets that account only
    annotate it);
  cluster: cluster-scoped;
  uncontrolled: only objects without a controller owner are the kind (a
    batch Job; a CronJob's or a JobSet's are never sent: their pods are
    injected as pods).
*/}}
{{- define "trainguard.jobKinds" -}}
- {resource: pytorchjobs, group: kubeflow.org, version: v1, kind: PyTorchJob, webhook: pytorchjobs, mutate: true, patched: true}
- {resource: pytorchjobs, group: training.kubedl.io, version: v1alpha1, kind: PyTorchJob, webhook: kubedl-pytorchjobs, mutate: true, patched: true}
- {resource: trainjobs, group: trainer.kubeflow.org, version: v1alpha1, kind: TrainJob, webhook: trainjobs, trainer: true, patched: true}
- {resource: trainingruntimes, group: trainer.kubeflow.org, version: v1alpha1, kind: TrainingRuntime, webhook: trainingruntimes, trainer: true}
- {resource: clustertrainingruntimes, group: trainer.kubeflow.org, version: v1alpha1, kind: ClusterTrainingRuntime, webhook: clustertrainingruntimes, trainer: true, cluster: true}
- {resource: jobs, group: batch, version: v1, kind: Job, webhook: jobs, mutate: true, patched: true, uncontrolled: true}
{{- end }}

{{/* The endpoint path suffix of a job kind: <group, dots as dashes>-<version>-<kind>. */}}
{{- define "trainguard.kindPath" -}}
{{ replace "." "-" .group }}-{{ .version }}-{{ lower .kind }}
{{- end }}

{{/* The patched kinds' resources, as a CEL list: the fence's workloads. */}}
{{- define "trainguard.patchedResources" -}}
{{- $out := list -}}
{{- range $k := include "trainguard.jobKinds" . | fromYamlArray -}}
{{- if and $k.patched (not (has $k.resource $out)) -}}{{- $out = append $out $k.resource -}}{{- end -}}
{{- end -}}
{{ toJson $out | replace "\"" "'" }}
{{- end }}
