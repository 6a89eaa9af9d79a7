{{/* The example application's pod template: your app (here a loop posting through the sidecar) next to
the sidecar, assembled from the same named templates a parent chart uses. */}}
{{- define "rocksidecar.examplePodTemplate" -}}
{{- $e := .Values.example -}}
metadata:
  labels:
    {{- include "rocksidecar.exampleSelector" . | nindent 4 }}
    {{- with $e.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    {{- include "rocksidecar.podAnnotations" . | nindent 4 }}
    {{- with $e.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ add (int $e.stopSeconds) (include "rocksidecar.terminationGracePeriodSeconds" .) }}
  securityContext:
    # fsGroup makes the store's volume writable by the sidecar's UID.
    fsGroup: 10001
    fsGroupChangePolicy: OnRootMismatch
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  {{- with $e.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .Values.sidecar.native }}
  initContainers:
    {{- include "rocksidecar.containers" . | nindent 4 }}
  {{- end }}
  containers:
    - name: app
      image: {{ printf "%s:%s" $e.image.repository $e.image.tag | quote }}
      imagePullPolicy: {{ $e.image.pullPolicy }}
      command: ["sh", "-c"]
      args:
        - |
          set -- --header 'Content-Type: application/json'
          if [ -n "$SIDECAR_AUTH_TOKEN" ]; then set -- "$@" --header "Authorization: Bearer $SIDECAR_AUTH_TOKEN"; fi
          trap 'exit 0' TERM
          while true; do
            wget -q -O- "$@" --post-data "{\"topic\":\"$TOPIC\",\"body\":\"hello $$(date +%s)\"}" "$SIDECAR_HTTP_URL/v1/messages"
            echo
            sleep "$INTERVAL_S" & wait $!
          done
      env:
        - name: TOPIC
          value: {{ $e.topic | quote }}
        - name: INTERVAL_S
          value: {{ $e.intervalSeconds | quote }}
        {{- include "rocksidecar.appEnv" . | nindent 8 }}
      resources:
        {{- toYaml $e.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.sidecar.securityContext | nindent 8 }}
    {{- if not .Values.sidecar.native }}
    {{- include "rocksidecar.containers" . | nindent 4 }}
    {{- end }}
  volumes:
    {{- include "rocksidecar.volumes" . | nindent 4 }}
  {{- with $e.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $e.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $e.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
