{{/* Common labels of every object of the release. */}}
{{- define "kdet.labels" -}}
app.kubernetes.io/part-of: kdet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image tag: the value, else the chart's appVersion. */}}
{{- define "kdet.tag" -}}
{{- .tag | default .appVersion -}}
{{- end -}}

{{/* The controller image reference. */}}
{{- define "kdet.image" -}}
{{ .Values.image.repository }}:{{ include "kdet.tag" (dict "tag" .Values.image.tag "appVersion" .Chart.AppVersion) }}
{{- end -}}

{{/* The Secret holding the user API token, and whether the chart makes it. */}}
{{- define "kdet.tokenSecret" -}}
{{- .Values.api.existingTokenSecret | default "kdet-user-token" -}}
{{- end -}}

{{/* The Secret holding the API's certificate, key and CA. */}}
{{- define "kdet.tlsSecret" -}}
{{- .Values.api.tls.existingSecret | default "kdet-api-tls" -}}
{{- end -}}

{{/* The key of the CA in that Secret. */}}
{{- define "kdet.tlsCaKey" -}}
{{- if .Values.api.tls.existingSecret -}}{{ .Values.api.tls.caKey }}{{- else -}}ca.crt{{- end -}}
{{- end -}}

{{/* The Secret holding the database DSN (key: see kdet.dbKey). */}}
{{- define "kdet.dbSecret" -}}
{{- if eq .Values.database.mode "external" -}}
{{- required "database.external.secretName is required with database.mode=external" .Values.database.external.secretName -}}
{{- else -}}
kdet-database
{{- end -}}
{{- end -}}

{{- define "kdet.dbKey" -}}
{{- if eq .Values.database.mode "external" -}}
{{- .Values.database.external.secretKey -}}
{{- else -}}
url
{{- end -}}
{{- end -}}

{{/*
A random secret kept across upgrades: the existing Secret's key when the
release already has one (lookup returns nothing under `helm template`),
else new random bytes. Args: ctx, name, key, and optionally len (default 40
alphanumerics).
*/}}
{{- define "kdet.keepRandom" -}}
{{- $old := lookup "v1" "Secret" .ctx.Release.Namespace .name -}}
{{- if and $old $old.data (hasKey $old.data .key) -}}
{{- index $old.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum (.len | default 40) -}}
{{- end -}}
{{- end -}}

{{/* The default checkpoint storage as kdet's experiment-config JSON. */}}
{{- define "kdet.checkpointStorage" -}}
{{- $cs := .Values.checkpointStorage -}}
{{- if eq $cs.type "shared_fs" -}}
{{- $o := dict "type" "shared_fs" "host_path" (required "checkpointStorage.sharedFs.hostPath is required with checkpointStorage.type=shared_fs" $cs.sharedFs.hostPath) -}}
{{- if $cs.sharedFs.storagePath }}{{ $_ := set $o "storage_path" $cs.sharedFs.storagePath }}{{ end -}}
{{- $o | toJson -}}
{{- else if eq $cs.type "s3" -}}
{{- $o := dict "type" "s3" "bucket" (required "checkpointStorage.s3.bucket is required with checkpointStorage.type=s3" $cs.s3.bucket) -}}
{{- if $cs.s3.prefix }}{{ $_ := set $o "prefix" $cs.s3.prefix }}{{ end -}}
{{- if $cs.s3.endpointUrl }}{{ $_ := set $o "endpoint_url" $cs.s3.endpointUrl }}{{ end -}}
{{- if $cs.s3.region }}{{ $_ := set $o "region" $cs.s3.region }}{{ end -}}
{{- if $cs.s3.credentialsSecret }}{{ $_ := set $o "credentials_secret" $cs.s3.credentialsSecret }}{{ end -}}
{{- $o | toJson -}}
{{- end -}}
{{- end -}}
