package runplot

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/plot"

	"github.com/deepgo-ml/deepgo/rundir"
)

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func errorMissing(what string) error { return fmt.Errorf("%w %s", ErrMissing, what) }

// memoryTags are the memory series drawn, with their legend names.
var memoryTags = []struct{ tag, name string }{
	{rundir.TagMemoryHost, "host (engine)"},
	{rundir.TagMemoryDevice, "device (engine)"},
	{rundir.TagMemoryPeak, "engine peak"},
	{rundir.TagRSS, "host RSS"},
	{rundir.TagGPUMemoryUsed, "GPU used"},
}

// memoryChart draws every memory series the run has, in GiB, with the
// capacity (deepgo_run.json, else the GPU's total) as a dashed line.
func memoryChart(r *rundir.Run) (*plot.Plot, error) {
	p := newPlot("memory", "GiB")
	var names []string
	var span []float64
	for i, m := range memoryTags {
		s := r.Get(m.tag)
		names = append(names, m.tag)
		if s == nil {
			continue
		}
		xy := points(s, gib)
		if err := addLine(p, m.name, xy, i); err != nil {
			return nil, err
		}
		for _, pt := range xy {
			span = append(span, pt.X)
		}
	}
	if len(span) == 0 {
		return nil, errorMissing("every memory tag: " + strings.Join(names, ", "))
	}
	capacity := 0.0
	if r.Info != nil && r.Info.MemoryCapacityBytes > 0 {
		capacity = float64(r.Info.MemoryCapacityBytes)
	} else if s := r.Get(rundir.TagGPUMemoryTotal); s != nil {
		capacity, _, _ = s.Max()
	}
	if capacity > 0 {
		lo, hi := span[0], span[0]
		for _, x := range span {
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
		xy := points(&rundir.Series{Steps: []int64{int64(lo), int64(hi)}, Values: []float64{0, 0}}, 1)
		if err := addLevel(p, fmt.Sprintf("capacity %.1f GiB", capacity/gib), capacity/gib, xy); err != nil {
			return nil, err
		}
	}
	return p, nil
}
