{{/*
Names, labels and the values several templates share.
*/}}

{{- define "toolgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "toolgate.injector" -}}
{{- printf "%s-injector" (include "toolgate.fullname" .) -}}
{{- end -}}

{{- define "toolgate.certSecret" -}}
{{- printf "%s-injector-tls" (include "toolgate.fullname" .) -}}
{{- end -}}

{{- define "toolgate.labels" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "toolgate.injectorSelector" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: injector
{{- end -}}

{{- define "toolgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
The numeric user toolgate runs as: the Dockerfile's USER and the UID the injector gives
sidecars (src/inject/mod.rs). tests/chart.rs checks they agree.
*/}}
{{- define "toolgate.uid" -}}65532{{- end -}}

{{/*
The DNS names the webhook's certificate must cover: how the API server reaches the Service.
*/}}
{{- define "toolgate.dnsNames" -}}
{{- $svc := include "toolgate.injector" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{/*
Pod Security "restricted" for a container, plus a read-only root filesystem.
*/}}
{{- define "toolgate.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ include "toolgate.uid" . }}
runAsGroup: {{ include "toolgate.uid" . }}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
