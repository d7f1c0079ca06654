{{/* The chart's short name. */}}
{{- define "gatetuner.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name when it already holds the chart name. */}}
{{- define "gatetuner.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gatetuner.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gatetuner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gatetuner.labels" -}}
{{ include "gatetuner.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gatetuner
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gatetuner.serviceAccountName" -}}
{{- default (include "gatetuner.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "gatetuner.leaseName" -}}
{{- default (include "gatetuner.fullname" .) .Values.leaderElection.leaseName -}}
{{- end -}}

{{- define "gatetuner.image" -}}
{{- if not .Values.image.repository -}}
{{- fail "image.repository: set the image you built from deploy/Dockerfile and pushed (no public image is published), e.g. --set image.repository=registry.example.com/platform/gatetuner" -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The daemon's config file: .Values.config with leaderElection, server.address and targets set
by the chart.
*/}}
{{- define "gatetuner.config" -}}
{{- if not .Values.targets -}}
{{- fail "targets: list at least one target (name, namespace, configMap, ...): see values.yaml" -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled: without it every replica would write" -}}
{{- end -}}
{{- $cfg := deepCopy (default (dict) .Values.config) -}}
{{- if hasKey $cfg "targets" -}}
{{- fail "config.targets: set the targets at the top level of the values (targets:), not under config" -}}
{{- end -}}
{{- $le := deepCopy (default (dict) (get $cfg "leaderElection")) -}}
{{- $_ := set $le "enabled" .Values.leaderElection.enabled -}}
{{- $_ := set $le "namespace" .Release.Namespace -}}
{{- $_ := set $le "name" (include "gatetuner.leaseName" .) -}}
{{- $_ := set $cfg "leaderElection" $le -}}
{{- $srv := deepCopy (default (dict) (get $cfg "server")) -}}
{{- $_ := set $srv "address" (printf ":%d" (int .Values.metricsPort)) -}}
{{- $_ := set $cfg "server" $srv -}}
{{- $_ := set $cfg "targets" .Values.targets -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
The targets' ConfigMaps and Deployments grouped by namespace, as JSON:
{"ns": {"configMaps": [...], "deployments": [...]}}. File targets need no RBAC.
*/}}
{{- define "gatetuner.rbacNamespaces" -}}
{{- $byNS := dict -}}
{{- range $i, $t := .Values.targets -}}
{{- if $t.configMap -}}
{{- if not $t.namespace -}}
{{- fail (printf "targets[%d] (%s): a configMap target needs its namespace" $i (default "" $t.name)) -}}
{{- end -}}
{{- $e := get $byNS $t.namespace -}}
{{- if not $e -}}
{{- $e = dict "configMaps" (list) "deployments" (list) -}}
{{- end -}}
{{- $_ := set $e "configMaps" (append $e.configMaps $t.configMap) -}}
{{- if $t.deployment -}}
{{- $_ := set $e "deployments" (append $e.deployments $t.deployment) -}}
{{- end -}}
{{- $_ := set $byNS $t.namespace $e -}}
{{- end -}}
{{- end -}}
{{- toJson $byNS -}}
{{- end -}}
