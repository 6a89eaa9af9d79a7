{{/*
Names and labels. The names are computed from .Release and .Values only, never .Chart, so that a parent
chart including the sidecar templates (with its own .Chart) gets the same names as the objects this
chart renders.

A name with a suffix (rocksidecar.suffixed) cuts the base name, not the suffix, to fit its limit: 63 for
a Service (a DNS label), 52 for a StatefulSet (its pods carry a controller-revision-hash label,
"<name>-<hash of up to 10>", and a label value is at most 63). Only names that could not work change: a
release whose objects exist keeps their names (a renamed StatefulSet would get new, empty volumes).
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

{{/* "<fullname><suffix>" within max characters: (list . "-dmq" 52) */}}
{{- define "rocksidecar.suffixed" -}}
{{- $ctx := index . 0 -}}{{- $suffix := index . 1 -}}{{- $max := index . 2 -}}
{{- printf "%s%s" (include "rocksidecar.fullname" $ctx | trunc (int (sub $max (len $suffix))) | trimSuffix "-") $suffix -}}
{{- end -}}
{{- define "rocksidecar.dmqName" -}}{{ include "rocksidecar.suffixed" (list . "-dmq" 52) }}{{- end -}}
{{- define "rocksidecar.exampleName" -}}{{ include "rocksidecar.suffixed" (list . "-example" 52) }}{{- end -}}
{{- define "rocksidecar.metricsName" -}}{{ include "rocksidecar.suffixed" (list . "-metrics" 63) }}{{- end -}}

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
{{- /* dmq.enabled: dmq.* is the one source of the replicas' flags and of the sidecars' inner topic
(rocksidecar.env); the same setting in config would be overridden, or disagree. */ -}}
{{- if .Values.dmq.enabled -}}
{{- $from := dict "dmq_inner_topic" "dmq.innerTopic" "dmq_group" "dmq.group" "dmq_http_addr" "dmq.httpPort" "dmq_instance" "the pod name" "dmq_replicas" "dmq.replicas" "dmq_copies" "dmq.copies" "dmq_marks_topic" "dmq.marksTopic" -}}
{{- range $key, $value := $from -}}
{{- if hasKey $.Values.config $key -}}
{{- fail (printf "config.%s: with dmq.enabled the chart sets it for the dmq replicas (and the sidecars' inner topic) from %s: set that instead" $key $value) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* The settings file's transactions: section holds transactions_* settings; the sidecar refuses one
given both ways. */ -}}
{{- range $key, $_ := (.Values.config.transactions | default dict) -}}
{{- if hasKey $.Values.config (printf "transactions_%s" $key) -}}
{{- fail (printf "config.transactions.%s and config.transactions_%s are the same setting: set it once" $key $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
