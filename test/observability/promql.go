// Package observability checks what the chart ships for monitoring: the
// PrometheusRule's alerts (promtool check + unit tests), that every metric
// an alert or a dashboard panel queries exists in a running trainguard, and
// that the ServiceMonitor and PrometheusRule are accepted by a real API
// server with prometheus-operator's CRDs.
package observability

import (
	"sort"
	"strings"
)

// keywords are PromQL words that look like identifiers but name no metric.
var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true, "inf": true, "nan": true,
	// Aggregations may put their by/without clause before the parenthesis.
	"sum": true, "avg": true, "min": true, "max": true, "count": true, "stddev": true, "stdvar": true, "group": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "limitk": true, "limit_ratio": true,
}

// labelListAfter are the keywords followed by a parenthesised label list.
var labelListAfter = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// MetricNames returns the metric names a PromQL expression selects. It is a
// small lexer, not a parser: it skips strings, label matchers ({...}),
// ranges ([...]), numbers, Grafana variables ($x, ${x}), function and
// aggregation names (an identifier followed by "("), keywords and the label
// lists after by/without/on/ignoring/group_left/group_right. What is left
// are metric names. TestMetricNames pins it on the shapes the chart uses.
func MetricNames(expr string) []string {
	seen := map[string]bool{}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(expr, i)
		case c == '{':
			i = skipGroup(expr, i, '{', '}')
		case c == '[':
			i = skipGroup(expr, i, '[', ']')
		case c == '$':
			i = skipVariable(expr, i)
		case c >= '0' && c <= '9' || c == '.':
			i = skipWhile(expr, i+1, isNumberChar)
		case isIdentStart(c):
			j := skipWhile(expr, i, isIdentChar)
			word := expr[i:j]
			next := skipWhile(expr, j, isSpace)
			switch {
			case labelListAfter[word] && next < len(expr) && expr[next] == '(':
				j = skipGroup(expr, next, '(', ')')
			case keywords[word], next < len(expr) && expr[next] == '(':
			default:
				seen[word] = true
			}
			i = j
		default:
			i++
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
func isIdentChar(c byte) bool  { return isIdentStart(c) || (c >= '0' && c <= '9') }
func isNumberChar(c byte) bool { return isIdentChar(c) || c == '.' }
func isSpace(c byte) bool      { return strings.IndexByte(" \t\r\n", c) >= 0 }

func skipWhile(s string, i int, ok func(byte) bool) int {
	for i < len(s) && ok(s[i]) {
		i++
	}
	return i
}

func skipString(s string, i int) int {
	quote := s[i]
	for i++; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quote != '`':
			i++
		case s[i] == quote:
			return i + 1
		}
	}
	return i
}

// skipGroup skips from an opening bracket to its match, strings included.
func skipGroup(s string, i int, open, closing byte) int {
	depth := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
			continue
		case c == open:
			depth++
		case c == closing:
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return i
}

func skipVariable(s string, i int) int {
	if i+1 < len(s) && s[i+1] == '{' {
		return skipGroup(s, i+1, '{', '}')
	}
	return skipWhile(s, i+1, isIdentChar)
}
