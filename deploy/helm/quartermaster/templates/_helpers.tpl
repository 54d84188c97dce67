{{/* The release's full name, at most 63 characters. */}}
{{- define "quartermaster.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the controller's pods. */}}
{{- define "quartermaster.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "quartermaster.labels" -}}
{{ include "quartermaster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The ServiceAccount's name. */}}
{{- define "quartermaster.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "quartermaster.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Refuses settings the controller would refuse, and the values that
became settings.* (Karpenter's names). */}}
{{- define "quartermaster.checkSettings" -}}
{{- $moved := dict "clusterName" "settings.clusterName" "interruptionQueue" "settings.interruptionQueue" "awsSettings" "settings.clusterEndpoint, .clusterCABundle, .serviceCidr and .kubernetesVersion" -}}
{{- range $old, $new := $moved }}
{{- if hasKey $.Values $old }}
{{- fail (printf "%s is now %s (Karpenter's names; see values.yaml)" $old $new) }}
{{- end }}
{{- end }}
{{- $s := .Values.settings -}}
{{- if not $s.clusterName }}
{{- fail "settings.clusterName is required" }}
{{- end }}
{{- range $key := list "batchIdleDuration" "batchMaxDuration" }}
{{- if not (regexMatch "^[0-9]+(ms|s|m|h)$" (toString (index $s $key))) }}
{{- fail (printf "settings.%s must be a whole number and a unit (ms, s, m, h), e.g. 10s, not %v" $key (index $s $key)) }}
{{- end }}
{{- end }}
{{- if and $s.kubernetesVersion (not (kindIs "string" $s.kubernetesVersion)) }}
{{- fail (printf "settings.kubernetesVersion must be quoted (\"1.30\"), or YAML reads %v as a number" $s.kubernetesVersion) }}
{{- end }}
{{- end -}}

{{/* The EC2 settings file (--aws-config) from settings.*: what is empty is
left out, and the controller discovers it with eks:DescribeCluster. */}}
{{- define "quartermaster.awsSettings" -}}
{{- $s := .Values.settings -}}
{{- $file := dict "clusterName" $s.clusterName -}}
{{- range $field, $key := dict "kubernetesVersion" "kubernetesVersion" "clusterEndpoint" "clusterEndpoint" "certificateAuthority" "clusterCABundle" "serviceCidr" "serviceCidr" }}
{{- with index $s $key }}
{{- $_ := set $file $field . }}
{{- end }}
{{- end }}
{{- toYaml $file }}
{{- end -}}
