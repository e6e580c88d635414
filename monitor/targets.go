package monitor

import (
	"fmt"
	"math"
)

// Health targets the monitor warns about once each time a metric crosses
// them (the targets of the deployment guide deepgo was built from, §6),
// and again only after the metric has fallen back below rearmFraction of
// its target.
const (
	// MemoryTargetPct: memory in use below 90% of capacity.
	MemoryTargetPct = 90.0
	// CommTargetPct: communication below 25% of the step time.
	CommTargetPct = 25.0
	// UpdateTargetMs: the parameter update (the boundary step) below 5 ms.
	UpdateTargetMs = 5.0
	// DefaultFiniteCheckEvery: a NaN/Inf check of the parameters every 500 steps.
	DefaultFiniteCheckEvery = 500
)

// rearmFraction: a metric that warned stays "over" until it falls below
// this fraction of its limit, so one hovering about the limit (the
// communication share of a small run, 22-30% from window to window) warns
// once, not at every print.
const rearmFraction = 0.8

// crossing is the once-per-crossing rule: a metric goes over its limit when
// value >= limit, and warns then, having been under; once over, it is under
// again only below rearmFraction × limit. A value that is not a number (no
// measurement) changes nothing.
func crossing(wasOver bool, value, limit float64) (over, warn bool) {
	if math.IsNaN(value) {
		return wasOver, false
	}
	if wasOver {
		return value >= rearmFraction*limit, false
	}
	over = value >= limit
	return over, over
}

// target is one §6 metric and whether it is over its limit now.
type target struct {
	name, unit string
	constant   string // the exported constant holding the limit, for the warning
	limit      float64
	over       bool
}

// check applies crossing and returns the warning to print, or "".
func (t *target) check(step int, value float64) string {
	var warn bool
	t.over, warn = crossing(t.over, value, t.limit)
	if !warn {
		return ""
	}
	return fmt.Sprintf("step %d: %s is %.4g%s, at or above deepgo's health target %.4g%s (monitor.%s)", step, t.name, value, t.unit, t.limit, t.unit, t.constant)
}

// window accumulates the steps since the last print.
type window struct {
	steps               int
	stepTime, comm, upd float64 // nanoseconds
}

func (w *window) add(stepTime, comm, upd float64) {
	w.steps++
	w.stepTime += stepTime
	w.comm += comm
	w.upd += upd
}

// commPct is the communication share of the window's step time, NaN when
// nothing was timed.
func (w *window) commPct() float64 {
	if w.stepTime <= 0 {
		return math.NaN()
	}
	return 100 * w.comm / w.stepTime
}

// updateMs is the window's mean boundary-step time.
func (w *window) updateMs() float64 {
	if w.steps == 0 {
		return math.NaN()
	}
	return w.upd / float64(w.steps) / 1e6
}
