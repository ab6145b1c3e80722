{{- define "tcpdoctor.labels" -}}
app.kubernetes.io/name: tcpdoctor
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "tcpdoctor.selector" -}}
app.kubernetes.io/name: tcpdoctor
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
