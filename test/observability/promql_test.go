package observability

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMetricNames(t *testing.T) {
	cases := map[string][]string{
		`sum by (webhook, decision) (rate(trainguard_admission_decisions_total{namespace=~"$namespace"}[5m]))`:        {"trainguard_admission_decisions_total"},
		`histogram_quantile(0.99, sum by (le) (rate(trainguard_admission_duration_seconds_bucket{a="}"}[5m]))) > 0.5`: {"trainguard_admission_duration_seconds_bucket"},
		`sum(rate(a_sum[1h])) / sum(rate(a_count[1h]))`:                                                               {"a_count", "a_sum"},
		`absent(up{namespace="x",service="y"} == 1)`:                                                                  {"up"},
		`x - time() < 7 * 86400 + 0.5 * .25`:                                                                          {"x"},
		`sum(m1) without (pod) + on (job) group_left (team) m2 offset 5m`:                                             {"m1", "m2"},
		`max(trainguard_rescheduler_brake_engaged{namespace=~"${namespace}"}) > 0 and bool m3`:                        {"m3", "trainguard_rescheduler_brake_engaged"},
		`rate(x[$__rate_interval]) * 1e3`:                                                                             {"x"},
	}
	for expr, want := range cases {
		assert.Equal(t, want, MetricNames(expr), expr)
	}
}
