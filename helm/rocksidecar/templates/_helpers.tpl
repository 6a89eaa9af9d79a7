{{/*
Names and labels. The names are computed from .Release and .Values only, never .Chart, so that a parent
chart including the sidecar templates (with its own .Chart) gets the same names as the objects this
chart renders.
*/}}
{{- define "rocksidecar.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "rocksidecar" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-rocksidecar" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rocksidecar.secretName" -}}
{{- .Values.existingSecret | default (include "rocksidecar.fullname" .) -}}
{{- end -}}

{{- define "rocksidecar.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}

{{/* Labels of the objects this chart renders itself (here .Chart is this chart). */}}
{{- define "rocksidecar.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: rocksidecar
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of the example application's pods. */}}
{{- define "rocksidecar.exampleSelector" -}}
app.kubernetes.io/name: rocksidecar-example
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selector labels of the Rock-DMQ service's pods. */}}
{{- define "rocksidecar.dmqSelector" -}}
app.kubernetes.io/name: rocksidecar-dmq
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* "true" when /metrics is exposed to Prometheus through the metrics proxy and a Service. */}}
{{- define "rocksidecar.metricsExposed" -}}
{{- if or .Values.metrics.enabled .Values.metrics.serviceMonitor.enabled -}}true{{- end -}}
{{- end -}}

{{/* Selector of the pods carrying the sidecar, for the metrics Service. */}}
{{- define "rocksidecar.metricsPodSelector" -}}
{{- if .Values.metrics.podSelector -}}
{{- toYaml .Values.metrics.podSelector -}}
{{- else if .Values.example.enabled -}}
{{- include "rocksidecar.exampleSelector" . -}}
{{- else -}}
{{- fail "metrics.podSelector: set it to the labels of your pods that carry the sidecar (example.enabled is false)" -}}
{{- end -}}
{{- end -}}

{{/* Checks the schema cannot express; rendered from configmap.yaml, which every install renders. */}}
{{- define "rocksidecar.validate" -}}
{{- $ports := list (int .Values.sidecar.httpPort) (int .Values.sidecar.grpcPort) -}}
{{- if include "rocksidecar.metricsExposed" . -}}
{{- $ports = append $ports (int .Values.metrics.port) -}}
{{- end -}}
{{- if ne (len $ports) (len (uniq $ports)) -}}
{{- fail (printf "sidecar.httpPort, sidecar.grpcPort and metrics.port must differ, got %v" $ports) -}}
{{- end -}}
{{- end -}}
