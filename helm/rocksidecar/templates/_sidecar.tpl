{{/*
The sidecar, for your own pod spec. Every template here takes a dict with "Values" (this chart's values)
and "Release"; from a chart that depends on this one (values under the key "rocksidecar"):

  {{- $rs := dict "Values" .Values.rocksidecar "Release" .Release }}
  metadata:
    annotations: {{- include "rocksidecar.podAnnotations" $rs | nindent 8 }}
  spec:
    terminationGracePeriodSeconds: {{ add 10 (include "rocksidecar.terminationGracePeriodSeconds" $rs) }}
    initContainers: {{- include "rocksidecar.containers" $rs | nindent 8 }}   # sidecar.native: true
    containers:
      - name: app
        env: {{- include "rocksidecar.appEnv" $rs | nindent 12 }}
    volumes: {{- include "rocksidecar.volumes" $rs | nindent 8 }}
  volumeClaimTemplates: {{- include "rocksidecar.volumeClaimTemplates" $rs | nindent 4 }}  # StatefulSet

helm/examples/orders-app is a complete, tested example.
*/}}

{{- define "rocksidecar.dataDir" -}}/var/lib/rocksidecar{{- end -}}
{{- define "rocksidecar.configFile" -}}/etc/rocksidecar/rocksidecar.yaml{{- end -}}
{{- define "rocksidecar.healthcheck" -}}/opt/rocksidecar/libexec/healthcheck.py{{- end -}}

{{/* rocksidecar.containers: the sidecar, plus the metrics proxy when metrics are exposed. List items.
Place them under initContainers when sidecar.native is true (Kubernetes >= 1.29 starts them before and
stops them after your app containers), under containers otherwise. */}}
{{- define "rocksidecar.containers" -}}
{{- $v := .Values -}}
- name: rocksidecar
  image: {{ include "rocksidecar.image" . | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if $v.sidecar.native }}
  restartPolicy: Always
  {{- end }}
  command: ["rocksidecar"]
  args: ["serve"]
  env:
    {{- include "rocksidecar.env" . | nindent 4 }}
  volumeMounts:
    - name: rocksidecar-data
      mountPath: {{ include "rocksidecar.dataDir" . }}
    - name: rocksidecar-config
      mountPath: {{ include "rocksidecar.configFile" . | dir }}
      readOnly: true
    - name: rocksidecar-tmp
      mountPath: /tmp
    {{- include "rocksidecar.tlsMount" . | nindent 4 }}
  {{- if $v.sidecar.preStopSleepSeconds }}
  lifecycle:
    # Classic sidecars get SIGTERM together with the app: waiting lets the app's last sends land first.
    preStop:
      exec:
        command: ["sleep", {{ $v.sidecar.preStopSleepSeconds | quote }}]
  {{- end }}
  # exec probes: kubelet's httpGet targets the pod IP, and the sidecar listens on 127.0.0.1 only.
  startupProbe:
    exec:
      command: ["python", {{ include "rocksidecar.healthcheck" . | quote }}, "/healthz"]
    {{- toYaml $v.sidecar.probes.startup | nindent 4 }}
  livenessProbe:
    exec:
      command: ["python", {{ include "rocksidecar.healthcheck" . | quote }}, "/healthz"]
    {{- toYaml $v.sidecar.probes.liveness | nindent 4 }}
  {{- if $v.sidecar.probes.readiness.enabled }}
  readinessProbe:
    exec:
      command: ["python", {{ include "rocksidecar.healthcheck" . | quote }}, "/readyz"]
    {{- toYaml (omit $v.sidecar.probes.readiness "enabled") | nindent 4 }}
  {{- end }}
  resources:
    {{- toYaml $v.sidecar.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.sidecar.securityContext | nindent 4 }}
{{- if include "rocksidecar.metricsExposed" . }}
- name: rocksidecar-metrics
  image: {{ include "rocksidecar.image" . | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if $v.sidecar.native }}
  restartPolicy: Always
  {{- end }}
  # Serves GET /metrics of the loopback listener on the pod IP (IPv4 or IPv6: [::] is dual-stack), and
  # nothing else.
  command: ["python", "/opt/rocksidecar/libexec/metrics_proxy.py"]
  args:
    - --listen
    - {{ printf "[::]:%d" (int $v.metrics.port) | quote }}
    - --upstream
    - {{ printf "127.0.0.1:%d" (int $v.sidecar.httpPort) | quote }}
  {{- if $v.auth.enabled }}
  env:
    - name: UPSTREAM_BEARER_TOKEN
      valueFrom:
        secretKeyRef:
          name: {{ include "rocksidecar.secretName" . }}
          key: auth-token
  {{- end }}
  ports:
    - name: metrics
      containerPort: {{ $v.metrics.port }}
      protocol: TCP
  livenessProbe:
    tcpSocket:
      port: metrics
    periodSeconds: 20
  resources:
    {{- toYaml $v.metrics.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.sidecar.securityContext | nindent 4 }}
{{- end }}
{{- end -}}

{{/* rocksidecar.env: the sidecar's settings that the chart owns. Tunables go to the config file. */}}
{{- define "rocksidecar.env" -}}
{{- $v := .Values -}}
- name: ROCKSIDECAR_NAMESRV
  value: {{ join "," $v.rocketmq.namesrv | quote }}
- name: ROCKSIDECAR_HTTP_ADDR
  value: {{ printf "127.0.0.1:%d" (int $v.sidecar.httpPort) | quote }}
- name: ROCKSIDECAR_GRPC_ADDR
  value: {{ printf "127.0.0.1:%d" (int $v.sidecar.grpcPort) | quote }}
- name: ROCKSIDECAR_DATA_DIR
  value: {{ include "rocksidecar.dataDir" . | quote }}
- name: ROCKSIDECAR_CONFIG
  value: {{ include "rocksidecar.configFile" . | quote }}
- name: ROCKSIDECAR_SHUTDOWN_GRACE_S
  value: {{ $v.sidecar.shutdownGraceSeconds | quote }}
{{- if $v.dmq.enabled }}
# dmq.innerTopic, the replicas' --inner-topic: where delay_mode: service sends delayed messages.
- name: ROCKSIDECAR_DMQ_INNER_TOPIC
  value: {{ $v.dmq.innerTopic | quote }}
{{- end }}
{{- if $v.rocketmq.acl.enabled }}
- name: ROCKSIDECAR_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "rocksidecar.secretName" . }}
      key: access-key
- name: ROCKSIDECAR_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "rocksidecar.secretName" . }}
      key: secret-key
{{- end }}
{{- if $v.auth.enabled }}
- name: ROCKSIDECAR_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "rocksidecar.secretName" . }}
      key: auth-token
{{- end }}
{{- with $v.rocketmq.tls }}
{{- if .enabled }}
- name: ROCKSIDECAR_TLS
  value: "true"
{{- if .secretName }}
- name: ROCKSIDECAR_TLS_CA_FILE
  value: /etc/rocksidecar/tls/ca.crt
{{- if .clientCertificate }}
- name: ROCKSIDECAR_TLS_CERT_FILE
  value: /etc/rocksidecar/tls/tls.crt
- name: ROCKSIDECAR_TLS_KEY_FILE
  value: /etc/rocksidecar/tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* rocksidecar.tlsMount / rocksidecar.tlsVolume: the Secret of rocketmq.tls, when there is one, for the
sidecar's and the dmq replicas' containers and pods. */}}
{{- define "rocksidecar.tlsMount" -}}
{{- if and .Values.rocketmq.tls.enabled .Values.rocketmq.tls.secretName }}
- name: rocksidecar-tls
  mountPath: /etc/rocksidecar/tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "rocksidecar.tlsVolume" -}}
{{- if and .Values.rocketmq.tls.enabled .Values.rocketmq.tls.secretName }}
- name: rocksidecar-tls
  secret:
    secretName: {{ .Values.rocketmq.tls.secretName }}
{{- end }}
{{- end -}}

{{/* rocksidecar.appEnv: how your app container reaches the sidecar (same network namespace). */}}
{{- define "rocksidecar.appEnv" -}}
- name: SIDECAR_HTTP_URL
  value: {{ printf "http://127.0.0.1:%d" (int .Values.sidecar.httpPort) | quote }}
- name: SIDECAR_GRPC_ADDR
  value: {{ printf "127.0.0.1:%d" (int .Values.sidecar.grpcPort) | quote }}
{{- if .Values.auth.enabled }}
- name: SIDECAR_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "rocksidecar.secretName" . }}
      key: auth-token
{{- end }}
{{- end -}}

{{/* rocksidecar.volumes: list items for the pod's volumes. The store is an emptyDir only in emptyDir mode;
otherwise it comes from rocksidecar.volumeClaimTemplates. */}}
{{- define "rocksidecar.volumes" -}}
- name: rocksidecar-config
  configMap:
    name: {{ include "rocksidecar.fullname" . }}
- name: rocksidecar-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- include "rocksidecar.tlsVolume" . }}
{{- if eq .Values.store.type "emptyDir" }}
- name: rocksidecar-data
  emptyDir:
    {{- with .Values.store.emptyDir.sizeLimit }}
    sizeLimit: {{ . }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* rocksidecar.volumeClaimTemplates: the store's PVC, for a StatefulSet (one store per pod). */}}
{{- define "rocksidecar.volumeClaimTemplates" -}}
{{- if eq .Values.store.type "persistentVolumeClaim" -}}
- metadata:
    name: rocksidecar-data
  spec:
    accessModes: ["ReadWriteOnce"]
    {{- with .Values.store.persistentVolumeClaim.storageClassName }}
    storageClassName: {{ . | quote }}
    {{- end }}
    resources:
      requests:
        storage: {{ .Values.store.persistentVolumeClaim.size }}
{{- end -}}
{{- end -}}

{{/* rocksidecar.podAnnotations: rolls the pods when the config file changes. */}}
{{- define "rocksidecar.podAnnotations" -}}
checksum/rocksidecar-config: {{ toYaml .Values.config | sha256sum }}
{{- end -}}

{{/* rocksidecar.terminationGracePeriodSeconds: what the sidecar needs to stop (preStop + drain + 5 s).
Add your app's own stop time. */}}
{{- define "rocksidecar.terminationGracePeriodSeconds" -}}
{{- add (int .Values.sidecar.preStopSleepSeconds) (int (ceil .Values.sidecar.shutdownGraceSeconds)) 5 -}}
{{- end -}}
