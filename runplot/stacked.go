package runplot

import (
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"

	"github.com/deepgo-ml/deepgo/rundir"
)

// timeChart stacks the step time: forward, backward compute, communication
// and the optimizer, per step. DeepSpeed's backward time includes the
// gradient all-reduce, so the backward layer is backward_inner where the run
// has it and backward minus communication otherwise.
func timeChart(r *rundir.Run) (*plot.Plot, error) {
	const wcb = "wall_clock_breakdown or flops_profiler.enabled"
	fwd, err := need(r, rundir.TagForwardMS, wcb)
	if err != nil {
		return nil, err
	}
	bwd, err := need(r, rundir.TagBackwardMS, wcb)
	if err != nil {
		return nil, err
	}
	comm := r.Get(rundir.TagCommTimeMS)
	if comm == nil {
		if comm, err = need(r, rundir.TagBackwardReduceMS, wcb); err != nil {
			return nil, err
		}
	}
	opt := r.Get(rundir.TagOptimizerTimeMS)
	if opt == nil {
		if opt, err = need(r, rundir.TagStepMS, wcb); err != nil {
			return nil, err
		}
	}
	inner := r.Get(rundir.TagBackwardInnerMS)
	layers := []struct {
		name  string
		value func(step int64) (float64, bool)
	}{
		{"forward", fwd.At},
		{"backward", func(step int64) (float64, bool) {
			if inner != nil {
				return inner.At(step)
			}
			b, ok1 := bwd.At(step)
			c, ok2 := comm.At(step)
			return max(b-c, 0), ok1 && ok2
		}},
		{"communication", comm.At},
		{"optimizer", opt.At},
	}
	// the steps every layer has a finite value at
	var steps []int64
	for _, st := range fwd.Steps {
		all := true
		for _, l := range layers {
			v, ok := l.value(st)
			all = all && ok && finite(v)
		}
		if all {
			steps = append(steps, st)
		}
	}
	if len(steps) == 0 {
		return nil, errorMissing("a step with all four times")
	}
	p := newPlot("step time breakdown", "ms")
	below := make([]float64, len(steps))
	for i, l := range layers {
		top := make([]float64, len(steps))
		for j, st := range steps {
			v, _ := l.value(st)
			top[j] = below[j] + v
		}
		poly, err := band(steps, below, top)
		if err != nil {
			return nil, err
		}
		poly.Color = plotutil.Color(i)
		poly.LineStyle.Width = 0
		p.Add(poly)
		p.Legend.Add(l.name, poly)
		below = top
	}
	return p, nil
}

// band is the area between lower and upper over steps (one step alone is
// drawn half a step wide each side, so that it shows).
func band(steps []int64, lower, upper []float64) (*plotter.Polygon, error) {
	xs := make([]float64, len(steps))
	for i, s := range steps {
		xs[i] = float64(s)
	}
	if len(xs) == 1 {
		xs = []float64{xs[0] - 0.5, xs[0] + 0.5}
		lower = []float64{lower[0], lower[0]}
		upper = []float64{upper[0], upper[0]}
	}
	ring := make(plotter.XYs, 0, 2*len(xs))
	for i := range xs {
		ring = append(ring, plotter.XY{X: xs[i], Y: upper[i]})
	}
	for i := len(xs) - 1; i >= 0; i-- {
		ring = append(ring, plotter.XY{X: xs[i], Y: lower[i]})
	}
	return plotter.NewPolygon(ring)
}
