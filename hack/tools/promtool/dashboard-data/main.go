// Command dashboard-data evaluates every query of trainguard's Grafana
// dashboard with Prometheus's own PromQL engine over a day of synthetic
// series (a simulated trainguard: admissions, checkpoint outcomes,
// rescheduling, a short webhook outage), and writes the results as JSON for
// hack/dashboard/plot.py, which draws docs/dashboard.png. Run it through
// hack/render-dashboard.sh. The data is made up; the queries are the
// dashboard's, evaluated by the real engine.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/tsdb"
)

type dashboard struct {
	Panels []struct {
		Title       string `json:"title"`
		Type        string `json:"type"`
		GridPos     struct{ X, Y, W, H int }
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

type series struct {
	Legend string    `json:"legend"`
	Times  []int64   `json:"times"`
	Values []float64 `json:"values"`
}

type panelOut struct {
	Title  string   `json:"title"`
	Type   string   `json:"type"`
	Unit   string   `json:"unit"`
	X      int      `json:"x"`
	Y      int      `json:"y"`
	W      int      `json:"w"`
	H      int      `json:"h"`
	Series []series `json:"series"`
}

func main() {
	in := flag.String("dashboard", "", "the dashboard JSON (charts/trainguard/dashboards/trainguard.json)")
	out := flag.String("out", "", "where to write the evaluated panels (JSON)")
	flag.Parse()
	if *in == "" || *out == "" {
		log.Fatal("usage: dashboard-data -dashboard FILE -out FILE")
	}
	if err := run(*in, *out); err != nil {
		log.Fatal(err)
	}
}

func run(in, out string) error {
	raw, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	dir, err := os.MkdirTemp("", "trainguard-dashboard-tsdb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := tsdb.Open(dir, nil, nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		return err
	}
	defer db.Close()
	end := time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)
	start := end.Add(-24 * time.Hour)
	if err := simulate(db, start, end); err != nil {
		return err
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	var panels []panelOut
	for _, p := range d.Panels {
		po := panelOut{Title: p.Title, Type: p.Type, Unit: p.FieldConfig.Defaults.Unit, X: p.GridPos.X, Y: p.GridPos.Y, W: p.GridPos.W, H: p.GridPos.H}
		for _, t := range p.Targets {
			s, err := evaluate(engine, db, grafanaVars(t.Expr), t.LegendFormat, end.Add(-18*time.Hour), end, p.Type == "stat")
			if err != nil {
				return fmt.Errorf("panel %q: %s: %w", p.Title, t.Expr, err)
			}
			po.Series = append(po.Series, s...)
		}
		panels = append(panels, po)
	}
	data, err := json.Marshal(panels)
	if err != nil {
		return err
	}
	return os.WriteFile(out, data, 0o644)
}

// grafanaVars replaces the dashboard's variables the way Grafana would with
// namespace "trainguard-system" selected.
func grafanaVars(expr string) string {
	return strings.NewReplacer("$namespace", "trainguard-system", "${namespace}", "trainguard-system",
		"$tenant", ".*", "${tenant}", ".*").Replace(expr)
}

func evaluate(engine *promql.Engine, db *tsdb.DB, expr, legend string, start, end time.Time, instant bool) ([]series, error) {
	if instant {
		start = end
	}
	q, err := engine.NewRangeQuery(context.Background(), db, nil, expr, start, end, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		return nil, res.Err
	}
	m, err := res.Matrix()
	if err != nil {
		return nil, err
	}
	var out []series
	for _, s := range m {
		ss := series{Legend: legendOf(legend, s.Metric.Map())}
		for _, p := range s.Floats {
			if math.IsNaN(p.F) || math.IsInf(p.F, 0) {
				continue // Grafana draws a gap
			}
			ss.Times = append(ss.Times, p.T)
			ss.Values = append(ss.Values, p.F)
		}
		out = append(out, ss)
	}
	return out, nil
}

var legendVar = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

func legendOf(format string, labels map[string]string) string {
	if format == "" {
		return ""
	}
	return legendVar.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendVar.FindStringSubmatch(m)[1]]
	})
}
