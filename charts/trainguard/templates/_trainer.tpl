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
webhook. ClusterTrainingRuntimes are cluster-scoped, so no namespace opted
in: that entry fails open whatever the values, because trainguard down must
never block anything outside opted-in namespaces.
*/}}
{{- define "trainguard.trainerValidatingWebhooks" -}}
{{- if include "trainguard.trainerEnabled" . }}
{{- $workloadFailurePolicy := include "trainguard.workloadFailurePolicy" . }}
- name: trainjobs.validate.trainguard.io
  {{- include "trainguard.clientConfig" (list . "/validate-trainer-kubeflow-org-v1alpha1-trainjob") | nindent 2 }}
  rules:
    - apiGroups: [trainer.kubeflow.org]
      apiVersions: [v1alpha1]
      resources: [trainjobs]
      operations: [CREATE, UPDATE]
      scope: Namespaced
  failurePolicy: {{ $workloadFailurePolicy }}
  namespaceSelector:
    {{- include "trainguard.workloadNamespaceSelector" . | nindent 4 }}
  {{- include "trainguard.webhookCommon" . | nindent 2 }}
- name: trainingruntimes.validate.trainguard.io
  {{- include "trainguard.clientConfig" (list . "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime") | nindent 2 }}
  rules:
    - apiGroups: [trainer.kubeflow.org]
      apiVersions: [v1alpha1]
      resources: [trainingruntimes]
      operations: [CREATE, UPDATE]
      scope: Namespaced
  failurePolicy: {{ $workloadFailurePolicy }}
  namespaceSelector:
    {{- include "trainguard.workloadNamespaceSelector" . | nindent 4 }}
  {{- include "trainguard.webhookCommon" . | nindent 2 }}
- name: clustertrainingruntimes.validate.trainguard.io
  {{- include "trainguard.clientConfig" (list . "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime") | nindent 2 }}
  rules:
    - apiGroups: [trainer.kubeflow.org]
      apiVersions: [v1alpha1]
      resources: [clustertrainingruntimes]
      operations: [CREATE, UPDATE]
      scope: Cluster
  failurePolicy: Ignore
  {{- include "trainguard.webhookCommon" . | nindent 2 }}
{{- end }}
{{- end }}
