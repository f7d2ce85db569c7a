package goodput

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Table is the run's report: ETTR per arm, then per disruption kind the
// time to training again, steps lost and lost time per arm, the kind that
// cost each arm most named.
func (res *Result) Table() string {
	var b strings.Builder
	wall := res.End.Sub(res.Start)
	fmt.Fprintf(&b, "\nwall time %s, %d disruptions\n\n", wall.Round(time.Second), len(res.Events))
	fmt.Fprintf(&b, "| arm | ETTR | committed steps | undisturbed step time | lost time | costliest disruption |\n|---|---|---|---|---|---|\n")
	for _, a := range res.Arms {
		lost := wall - time.Duration(a.Steps)*a.StepTime
		kind, d := a.costliest(res.Events)
		fmt.Fprintf(&b, "| %s | %.1f %% | %d | %s | %s | %s (%s) |\n", a.Arm.Name, 100*a.ETTR, a.Steps,
			a.StepTime.Round(time.Millisecond), lost.Round(time.Second), kind, d.Round(time.Second))
	}
	fmt.Fprintf(&b, "\nper disruption (time to training again / steps lost / lost time in its interval):\n\n| # | at | kind | target |")
	for _, a := range res.Arms {
		fmt.Fprintf(&b, " %s |", a.Arm.Name)
	}
	fmt.Fprintf(&b, "\n|---|---|---|---|%s\n", strings.Repeat("---|", len(res.Arms)))
	for i, ev := range res.Events {
		fmt.Fprintf(&b, "| %d | %s | %s | %s |", i+1, ev.At.Round(time.Second), ev.Kind, ev.Target)
		for _, a := range res.Arms {
			fmt.Fprintf(&b, " %s |", a.Impacts[i])
		}
		b.WriteString("\n")
	}
	res.costTables(&b)
	if len(res.Corrupt) == 0 {
		b.WriteString("\ntraining state: consistent in every arm (every step's loss equal across incarnations and arms, every resume at or behind the progress, ranks resumed together)\n")
	} else {
		b.WriteString("\ntraining state NOT consistent:\n")
		for _, c := range res.Corrupt {
			fmt.Fprintf(&b, "  %s\n", c)
		}
	}
	return b.String()
}

// costTables prints what each disruption cost each arm, split (Cost),
// and per kind the median cost beside its floor (Floors.For): with it a
// reader maps the figures to any failure rate, ETTR ~ 1 - cost / interval.
func (res *Result) costTables(b *strings.Builder) {
	fmt.Fprintf(b, "\ncost per disruption (detection + restart + recompute = cost; the kubelet's container restarts and back-off):\n\n| # | kind | floor |")
	for _, a := range res.Arms {
		fmt.Fprintf(b, " %s |", a.Arm.Name)
	}
	fmt.Fprintf(b, "\n|---|---|---|%s\n", strings.Repeat("---|", len(res.Arms)))
	for i, ev := range res.Events {
		fmt.Fprintf(b, "| %d | %s | %s |", i+1, ev.Kind, secs(res.Floors.For(ev.Kind, res.Hold)))
		for _, a := range res.Arms {
			fmt.Fprintf(b, " %s |", a.Costs[i])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "\nmedian cost per kind (n; floor: a fresh pod %s, a fresh trainer %s to the first step, measured at the start; a Kueue preemption also holds the quota %s):\n\n| kind | n | floor |",
		secs(res.Floors.Pod), secs(res.Floors.Process), res.Hold.Round(time.Second))
	for _, a := range res.Arms {
		fmt.Fprintf(b, " %s |", a.Arm.Name)
	}
	fmt.Fprintf(b, "\n|---|---|---|%s\n", strings.Repeat("---|", len(res.Arms)))
	for _, k := range res.kinds() {
		n := 0
		for _, ev := range res.Events {
			if ev.Kind == k {
				n++
			}
		}
		fmt.Fprintf(b, "| %s | %d | %s |", k, n, secs(res.Floors.For(k, res.Hold)))
		for _, a := range res.Arms {
			fmt.Fprintf(b, " %s |", a.medianCost(res.Events, k))
		}
		b.WriteString("\n")
	}
}

// kinds are the kinds of the run's disruptions, in the order ParseKinds knows them.
func (res *Result) kinds() []Kind {
	var ks []Kind
	for _, k := range byName {
		for _, ev := range res.Events {
			if ev.Kind == k {
				ks = append(ks, k)
				break
			}
		}
	}
	return ks
}

// medianCost is the median of the arm's costs for kind k: a disruption it
// did not train again after counts as its whole interval's lost time (at
// least that), one it kept training through as 0.
func (a ArmResult) medianCost(evs []Applied, k Kind) string {
	var d []time.Duration
	open := false
	for i, ev := range evs {
		if ev.Kind != k {
			continue
		}
		c, cost := a.Costs[i], time.Duration(0)
		switch {
		case c.Kept:
		case c.Replaced && c.Trained:
			cost = c.Total()
		default:
			open, cost = true, a.Impacts[i].LostTime
		}
		d = append(d, cost)
	}
	if len(d) == 0 {
		return "-"
	}
	slices.Sort(d)
	m := d[len(d)/2]
	if len(d)%2 == 0 {
		m = (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	if open {
		return "≥ " + secs(m)
	}
	return secs(m)
}

func (im Impact) String() string {
	switch {
	case im.Restarted && !im.Stalled:
		return fmt.Sprintf("%s / %d / %s", im.ToTrain.Round(100*time.Millisecond), im.StepsLost, im.LostTime.Round(time.Second))
	case im.Restarted:
		return fmt.Sprintf("resumed, no step yet / %d / %s", im.StepsLost, im.LostTime.Round(time.Second))
	case im.Stalled:
		return fmt.Sprintf("not training again / - / %s", im.LostTime.Round(time.Second))
	}
	return fmt.Sprintf("kept training / 0 / %s", im.LostTime.Round(time.Second))
}

// costliest is the disruption kind whose intervals lost the arm most time.
func (a ArmResult) costliest(evs []Applied) (Kind, time.Duration) {
	by := map[Kind]time.Duration{}
	for i, ev := range evs {
		by[ev.Kind] += a.Impacts[i].LostTime
	}
	var kinds []Kind
	for k := range by {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		return by[kinds[i]] > by[kinds[j]] || by[kinds[i]] == by[kinds[j]] && kinds[i] < kinds[j]
	})
	if len(kinds) == 0 {
		return "none", 0
	}
	return kinds[0], by[kinds[0]]
}

// ByName is the result of the named arm.
func (res *Result) ByName(name string) (ArmResult, bool) {
	for _, a := range res.Arms {
		if a.Arm.Name == name {
			return a, true
		}
	}
	return ArmResult{}, false
}

// CSV files for the plot: progress (arm,seconds,step) and events
// (seconds,kind), both from the schedule's start.
func (res *Result) CSV() (progress, events string) {
	var p, e strings.Builder
	p.WriteString("arm,seconds,step\n")
	for _, a := range res.Arms {
		p.WriteString(a.Series.CSV(a.Arm.Name, res.Start))
	}
	e.WriteString("seconds,kind\n")
	for _, ev := range res.Events {
		fmt.Fprintf(&e, "%.3f,%s\n", ev.T.Sub(res.Start).Seconds(), ev.Kind)
	}
	fmt.Fprintf(&e, "%.3f,end\n", res.End.Sub(res.Start).Seconds())
	return p.String(), e.String()
}
