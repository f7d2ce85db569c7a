{{- /*
The rules of the binary's configuration (internal/config/v1alpha1/validation.go) that
JSON schema cannot state: duration bounds (floors and ceilings), backoffMax
against backoffBase, a recover strategy listed twice. A value the binary
would refuse fails the render with the binary's words, instead of a
Deployment that crash-loops.
test/chart/configbounds_test.go holds the schema and these checks to the
binary's verdicts, both ways.
*/}}

{{/* trainguard.seconds: a Go duration string (schema-checked) in seconds. */}}
{{- define "trainguard.seconds" -}}
{{- $total := 0.0 -}}
{{- $units := dict "ns" 1e-9 "us" 1e-6 "µs" 1e-6 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" (toString .) -1 -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" . | float64 -}}
{{- $unit := regexReplaceAll "^[0-9]+(\\.[0-9]+)?" . "" -}}
{{- $total = addf $total (mulf $num (get $units $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{- /*
trainguard.valueKeys: the keys values.schema.json declares at the top level
and under the objects where keys most often land under the wrong parent
(templates cannot read the schema; test/chart holds this equal to it).
*/ -}}
{{- define "trainguard.valueKeys" -}}
"": [admissionPolicy, affinity, certManager, clusterWide, clusterWideExcludedNamespaces, config, excludedNamespaces, extraArgs, fullnameOverride, global, image, imagePullSecrets, metrics, monitoring, nameOverride, networkPolicy, nodeSelector, podAnnotations, podDisruptionBudget, podLabels, priorityClassName, replicaCount, rescheduler, resources, serviceAccount, shutdownDelaySeconds, tolerations, topologySpreadConstraints, trainer, webhook]
"config": [admissionMode, agent, checkpoint, faultScheduling, gpu, leaderElection, maxReschedules, mutators, nodeWarnings, priorityBoost, recoverStrategy, rescheduler, taskd, trainingContainer]
"rescheduler": [enabled]
"config.rescheduler": [backoffBase, backoffMax, badNodeTTL, concurrentReconciles, forceDeleteAfter, graceOverTime, leaseLostAfter, maxBadNodes, nodeEvictionBurst, nodeEvictionRate, nodeLostGrace, retryEvictionBurst, retryEvictionRate, unhealthyClusterThreshold, unhealthyZoneThreshold, unknownExitCodeRetryable]
"config.checkpoint": [claim, gracePeriodMargin, interval, path, preStopTimeout, requireDurable]
"webhook": [clusterWideFailurePolicy, failurePolicy, podMatchConditions, reinvocationPolicy, timeoutSeconds]
{{- end -}}

{{- /*
trainguard.checkKeys: an unknown key at the top level, under config or under
rescheduler fails the render naming the parents that do have it (the
schema lets these three through for that). The argument is the root context.
*/ -}}
{{- define "trainguard.checkKeys" -}}
{{- $known := include "trainguard.valueKeys" . | fromYaml -}}
{{- $checked := dict "" .Values "config" (.Values.config | default dict) "rescheduler" (.Values.rescheduler | default dict) -}}
{{- range $parent := list "" "config" "rescheduler" -}}
{{- $here := get $known $parent -}}
{{- $where := ternary "the top level" $parent (eq $parent "") -}}
{{- range $key, $_ := get $checked $parent -}}
{{- if not (has $key $here) -}}
{{- $path := ternary $key (printf "%s.%s" $parent $key) (eq $parent "") -}}
{{- $elsewhere := list -}}
{{- range $other := keys $known | sortAlpha -}}
{{- if and (ne $other $parent) (has $key (get $known $other)) -}}
{{- $elsewhere = append $elsewhere (ternary $key (printf "%s.%s" $other $key) (eq $other "")) -}}
{{- end -}}
{{- end -}}
{{- $hint := "" -}}
{{- if $elsewhere }}{{ $hint = printf "did you mean %s? " (join " or " $elsewhere) }}{{ end -}}
{{- fail (printf "%s: unknown key; %s%s takes only: %s" $path $hint $where (join ", " $here)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "trainguard.checkConfig" -}}
{{- $cfg := . -}}
{{- $ckpt := get $cfg "checkpoint" | default dict -}}
{{- with $ckpt.path -}}
{{- $root := regexFind "^/(etc|usr|bin|sbin|lib[^/]*|boot|opt/trainguard|proc|sys|dev|var/run/secrets|run/secrets)(/|$)" (toString .) -}}
{{- if $root -}}
{{- $dir := regexReplaceAll "^/lib[^/]*" (trimSuffix "/" $root) "/lib" -}}
{{- fail (printf "config.checkpoint.path: Invalid value: %q: must not be under the system directory %s; use e.g. /checkpoint" (toString .) $dir) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $ckpt "preStopTimeout" -}}
{{- $s := include "trainguard.seconds" $ckpt.preStopTimeout | float64 -}}
{{- if or (le $s 0.0) (gt $s 3600.0) -}}
{{- fail (printf "config.checkpoint.preStopTimeout: Invalid value: %q: must be positive and at most 1h0m0s" (toString $ckpt.preStopTimeout)) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $ckpt "interval" -}}
{{- $s := include "trainguard.seconds" $ckpt.interval | float64 -}}
{{- if and (ne $s 0.0) (or (lt $s 10.0) (gt $s 86400.0)) -}}
{{- fail (printf "config.checkpoint.interval: Invalid value: %q: must be 0s (off) or between 10s and 24h0m0s, such as 10m" (toString $ckpt.interval)) -}}
{{- end -}}
{{- end -}}
{{- with $cfg.recoverStrategy -}}
{{- $parts := splitList "," . -}}
{{- if ne (len $parts) (len (uniq $parts)) -}}
{{- fail (printf "config.recoverStrategy: Invalid value: %q: a strategy is listed twice" .) -}}
{{- end -}}
{{- end -}}
{{- $pb := get $cfg "priorityBoost" | default dict -}}
{{- if hasKey $pb "minInterval" -}}
{{- $s := include "trainguard.seconds" $pb.minInterval | float64 -}}
{{- if or (lt $s 10.0) (gt $s 3600.0) -}}
{{- fail (printf "config.priorityBoost.minInterval: Invalid value: %q: must be between 10s and 1h0m0s: trainguard reads each job's work at risk every 10s, and each change is a Workload write Kueue re-queues the job for" (toString $pb.minInterval)) -}}
{{- end -}}
{{- end -}}
{{- $nw := get $cfg "nodeWarnings" | default dict -}}
{{- $nwBounds := dict
  "commitTimeout" (list 5.0 3600.0 "must be between 5s and 1h0m0s (the trainer's time from the request to the commit)")
  "minInterval" (list 10.0 86400.0 "must be between 10s and 24h0m0s (at most one request per job this often)") -}}
{{- range $name := keys $nwBounds | sortAlpha -}}
{{- $b := get $nwBounds $name -}}
{{- if hasKey $nw $name -}}
{{- $s := include "trainguard.seconds" (get $nw $name) | float64 -}}
{{- if or (lt $s (index $b 0)) (gt $s (index $b 1)) -}}
{{- fail (printf "config.nodeWarnings.%s: Invalid value: %q: %s" $name (toString (get $nw $name)) (index $b 2)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $le := get $cfg "leaderElection" | default dict -}}
{{- range $name := list "leaseDuration" "renewDeadline" "retryPeriod" -}}
{{- if and (hasKey $le $name) (le (include "trainguard.seconds" (get $le $name) | float64) 0.0) -}}
{{- fail (printf "config.leaderElection.%s: Invalid value: %q: must be positive" $name (toString (get $le $name))) -}}
{{- end -}}
{{- end -}}
{{- $lease := include "trainguard.seconds" ($le.leaseDuration | default "15s") | float64 -}}
{{- $renew := include "trainguard.seconds" ($le.renewDeadline | default "10s") | float64 -}}
{{- $retry := include "trainguard.seconds" ($le.retryPeriod | default "2s") | float64 -}}
{{- if gt $lease 300.0 -}}
{{- fail (printf "config.leaderElection.leaseDuration: Invalid value: %q: must be at most 5m0s: when the leader dies, the other replicas wait this long before one takes over, and nothing is rescheduled meanwhile" (toString $le.leaseDuration)) -}}
{{- end -}}
{{- if ge $renew $lease -}}
{{- fail (printf "config.leaderElection.renewDeadline: Invalid value: %q: must be below leaseDuration (%s)" (toString ($le.renewDeadline | default "10s")) (toString ($le.leaseDuration | default "15s"))) -}}
{{- end -}}
{{- if le $renew (mulf $retry 1.2) -}}
{{- fail (printf "config.leaderElection.retryPeriod: Invalid value: %q: must be below renewDeadline (%s) / 1.2" (toString ($le.retryPeriod | default "2s")) (toString ($le.renewDeadline | default "10s"))) -}}
{{- end -}}
{{- $r := get $cfg "rescheduler" | default dict -}}
{{- range $name := list "nodeLostGrace" "graceOverTime" "badNodeTTL" "backoffBase" "backoffMax" "forceDeleteAfter" "leaseLostAfter" -}}
{{- if hasKey $r $name -}}
{{- if le (include "trainguard.seconds" (get $r $name) | float64) 0.0 -}}
{{- fail (printf "config.rescheduler.%s: Invalid value: %q: must be positive" $name (toString (get $r $name))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* The floors of configv1alpha1's reschedulerFloors, in its words. */ -}}
{{- $floors := dict
  "leaseLostAfter" (list 20.0 "20s" "twice the kubelet's node Lease renewal interval (10s by default): the brakes count a node silent at half this bound, so below it healthy nodes look silent before each renewal and the cluster brake can hold every action, a real node loss included; set it to 20s or more (default 25s), or to twice the interval of kubelets that renew less often")
  "nodeLostGrace" (list 10.0 "10s" "a restarting kubelet reports NotReady for a few seconds and posts its status every 10s; a shorter grace moves jobs over a kubelet restart")
  "forceDeleteAfter" (list 10.0 "10s" "a force delete bypasses PodDisruptionBudgets and the kubelet's confirmation, so the node must have missed at least one kubelet heartbeat first") -}}
{{- range $name := keys $floors | sortAlpha -}}
{{- $floor := get $floors $name -}}
{{- if hasKey $r $name -}}
{{- if lt (include "trainguard.seconds" (get $r $name) | float64) (index $floor 0) -}}
{{- fail (printf "config.rescheduler.%s: Invalid value: %q: must be at least %s: %s" $name (toString (get $r $name)) (index $floor 1) (index $floor 2)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $base := include "trainguard.seconds" ($r.backoffBase | default "10s") | float64 -}}
{{- $max := include "trainguard.seconds" ($r.backoffMax | default "5m") | float64 -}}
{{- if lt $max $base -}}
{{- fail (printf "config.rescheduler.backoffMax: Invalid value: %q: must not be below backoffBase (%s)" (toString ($r.backoffMax | default "5m")) (toString ($r.backoffBase | default "10s"))) -}}
{{- end -}}
{{- end -}}

{{- /*
extraArgs may set any setting as a flag, which wins over the file; not the
priority boost's switch and bound: RBAC's Workload patch and the fence's
bound are rendered from config.priorityBoost, and a flag would leave them
disagreeing with what the binary does.
*/ -}}
{{- define "trainguard.checkExtraArgs" -}}
{{- range .Values.extraArgs -}}
{{- if regexMatch "^--priority-boost-(enabled|max-boost)(=|$)" (toString .) -}}
{{- fail (printf "extraArgs: Invalid value: %q: set config.priorityBoost.enabled and config.priorityBoost.maxBoost instead: trainguard's RBAC and its admission policy's bound on the boost are rendered from them" (toString .)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
