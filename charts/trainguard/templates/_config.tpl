{{- /*
The rules of the binary's configuration (internal/config/v1alpha1/validation.go) that
JSON schema cannot state: duration bounds, backoffMax against backoffBase, a
recover strategy listed twice. A value the binary would refuse fails the
render with the binary's words, instead of a Deployment that crash-loops.
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

{{- define "trainguard.checkConfig" -}}
{{- $cfg := . -}}
{{- $ckpt := get $cfg "checkpoint" | default dict -}}
{{- if hasKey $ckpt "preStopTimeout" -}}
{{- $s := include "trainguard.seconds" $ckpt.preStopTimeout | float64 -}}
{{- if or (le $s 0.0) (gt $s 3600.0) -}}
{{- fail (printf "config.checkpoint.preStopTimeout: Invalid value: %q: must be positive and at most 1h0m0s" (toString $ckpt.preStopTimeout)) -}}
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
{{- if or (le $s 0.0) (gt $s 3600.0) -}}
{{- fail (printf "config.priorityBoost.minInterval: Invalid value: %q: must be positive and at most 1h0m0s" (toString $pb.minInterval)) -}}
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
{{- $base := include "trainguard.seconds" ($r.backoffBase | default "10s") | float64 -}}
{{- $max := include "trainguard.seconds" ($r.backoffMax | default "5m") | float64 -}}
{{- if lt $max $base -}}
{{- fail (printf "config.rescheduler.backoffMax: Invalid value: %q: must not be below backoffBase (%s)" (toString ($r.backoffMax | default "5m")) (toString ($r.backoffBase | default "10s"))) -}}
{{- end -}}
{{- end -}}
