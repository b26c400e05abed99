{{/* The release's full name, at most 63 characters. */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The ConfigMap holding the rate-limit config files. */}}
{{- define "sluice.configMapName" -}}
{{- .Values.config.existingConfigMap | default (printf "%s-config" (include "sluice.fullname" .)) -}}
{{- end -}}

{{/* Checks of values that would make a broken release. */}}
{{- define "sluice.validate" -}}
{{- if not (has .Values.backend (list "memory" "redis")) -}}
{{- fail (printf "backend must be memory or redis, not %q" .Values.backend) -}}
{{- end -}}
{{- if and (eq .Values.backend "redis") (not (has .Values.redis.type (list "single" "sentinel" "cluster"))) -}}
{{- fail (printf "redis.type must be single, sentinel or cluster, not %q" .Values.redis.type) -}}
{{- end -}}
{{- if and (eq .Values.backend "redis") (not .Values.redis.url) -}}
{{- fail "redis.url is required with backend redis" -}}
{{- end -}}
{{- if and .Values.admin.exposeOnService (not .Values.admin.tokenSecret) -}}
{{- fail "admin.exposeOnService needs admin.tokenSecret: the admin listener can reset counters" -}}
{{- end -}}
{{- if and (not .Values.config.existingConfigMap) (not .Values.config.files) -}}
{{- fail "set config.files or config.existingConfigMap" -}}
{{- end -}}
{{- end -}}
