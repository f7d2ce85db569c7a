{{/*
Kubeflow Trainer v2 support (docs/trainjob.md). Its webhook entries and
RBAC render only when Trainer's API is there, so a cluster without Trainer
gets no rule for kinds its API server does not know:
  trainer.enabled=auto (default): on when the API server serves
    trainer.kubeflow.org/v1alpha1 (helm install/upgrade against the cluster:
    .Capabilities, or a lookup of the TrainJob CRD); off for `helm template`
    unless --api-versions trainer.kubeflow.org/v1alpha1 is given;
  trainer.enabled=true / false: forced.
Install trainguard after Trainer, or `helm upgrade` once Trainer is in.
*/}}
{{- define "trainguard.trainerEnabled" -}}
{{- $v := .Values.trainer.enabled | toString -}}
{{- if eq $v "true" -}}
true
{{- else if eq $v "auto" -}}
{{- if or (.Capabilities.APIVersions.Has "trainer.kubeflow.org/v1alpha1") (lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "trainjobs.trainer.kubeflow.org") -}}
true
{{- end -}}
{{- end -}}
{{- end }}

{{/*
Validating entries for TrainJob, TrainingRuntime and ClusterTrainingRuntime,
included in the chart's ValidatingWebhookConfiguration (so the CA bundle is
injected there in both certificate modes). No mutating entries: trainguard
never mutates these kinds; it injects the trainer pods through the pod
webhook. As for PyTorchJobs, CREATE and UPDATE are separate entries: CREATE
fails closed in opted-in namespaces (workloadFailurePolicy), UPDATE always
fails open and is sent only when the spec or checked metadata changes, so
with trainguard down Kueue's suspend toggle, label edits, the garbage
collector's finalizer removal and Trainer's resource-in-use finalizer on a
runtime still go through (DESIGN.md, safety invariant 4).
ClusterTrainingRuntimes are cluster-scoped, so no namespace opted in: that
entry fails open whatever the values, because trainguard down must never
block anything outside opted-in namespaces.
*/}}
{{- define "trainguard.trainerValidatingWebhooks" -}}
{{- if include "trainguard.trainerEnabled" . }}
{{- $workloadFailurePolicy := include "trainguard.workloadFailurePolicy" . }}
{{- range $kind := include "trainguard.jobKinds" . | fromYamlArray }}
{{- if and $kind.trainer (not $kind.cluster) }}
{{- $_ := set $kind "name" $kind.resource }}
{{- $_ := set $kind "path" (printf "/validate-%s" (include "trainguard.kindPath" $kind)) }}
- name: {{ $kind.name }}.validate.trainguard.io
  {{- include "trainguard.clientConfig" (list $ $kind.path) | nindent 2 }}
  rules:
    - apiGroups: [trainer.kubeflow.org]
      apiVersions: [v1alpha1]
      resources: [{{ $kind.name }}]
      operations: [CREATE]
      scope: Namespaced
  failurePolicy: {{ $workloadFailurePolicy }}
  namespaceSelector:
    {{- include "trainguard.workloadNamespaceSelector" $ | nindent 4 }}
  {{- include "trainguard.webhookCommon" $ | nindent 2 }}
- name: {{ $kind.name }}-updates.validate.trainguard.io
  {{- include "trainguard.clientConfig" (list $ $kind.path) | nindent 2 }}
  rules:
    - apiGroups: [trainer.kubeflow.org]
      apiVersions: [v1alpha1]
      resources: [{{ $kind.name }}]
      operations: [UPDATE]
      scope: Namespaced
  failurePolicy: Ignore
  namespaceSelector:
    {{- include "trainguard.workloadNamespaceSelector" $ | nindent 4 }}
  matchConditions:
    - name: spec-or-checked-metadata-changed
      expression: {{ printf "object.spec != oldObject.spec || %s" (include "trainguard.cel.checkedMetadataChanged" $) | quote }}
  {{- include "trainguard.webhookCommon" $ | nindent 2 }}
{{- end }}
{{- end }}
- name: clustertrainingruntimes.validate.trainguard.io
  {{- include "trainguard.clientConfig" (list . "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime") | nindent 2 }}
  rules:
    - apiGroups: [trainer.kubeflow.org]
      apiVersions: [v1alpha1]
      resources: [clustertrainingruntimes]
      operations: [CREATE, UPDATE]
      scope: Cluster
  failurePolicy: Ignore
  matchConditions:
    - name: create-or-spec-or-checked-metadata-changed
      expression: {{ printf "request.operation == 'CREATE' || object.spec != oldObject.spec || %s" (include "trainguard.cel.checkedMetadataChanged" .) | quote }}
  {{- include "trainguard.webhookCommon" . | nindent 2 }}
{{- end }}
{{- end }}
