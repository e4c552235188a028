{{/* Names and labels shared by every template. */}}

{{/* The chart name, or nameOverride. */}}
{{- define "tessera.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every object's name: fullnameOverride, else <release>[-<chart>]. */}}
{{- define "tessera.fullname" -}}
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

{{- define "tessera.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The standard app.kubernetes.io labels on every object. */}}
{{- define "tessera.labels" -}}
helm.sh/chart: {{ include "tessera.chart" . }}
{{ include "tessera.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tessera
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* What the Deployment, Service and PodDisruptionBudget select pods by. */}}
{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tessera.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tessera.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tessera.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "tessera.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "tessera.leaseName" -}}
{{- default (include "tessera.fullname" .) .Values.ha.leaseName }}
{{- end }}

{{- define "tessera.metricsServiceName" -}}
{{- printf "%s-metrics" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* PromQL label matchers for the operator's own series. */}}
{{- define "tessera.promSelector" -}}
{{- if .Values.metrics.prometheusRule.selector }}
{{- .Values.metrics.prometheusRule.selector }}
{{- else }}
{{- printf "job=%q,namespace=%q" (include "tessera.metricsServiceName" .) .Release.Namespace }}
{{- end }}
{{- end }}
