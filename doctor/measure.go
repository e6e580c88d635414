package doctor

import (
	"fmt"
	"sort"

	"github.com/deepgo-ml/deepgo/rundir"
)

// measured is one number read off a run, with where it came from.
type measured struct {
	value float64
	step  int64
	from  string
}

// peakMemory is the largest memory reading of the run: the engine's peak,
// the device's use (the GPU's own figure where telemetry answered), or on
// the CPU the host memory and RSS. ok is false when the run has none.
func peakMemory(r *rundir.Run) (m measured, ok bool) {
	tags := []string{rundir.TagMemoryPeak, rundir.TagMemoryDevice, rundir.TagGPUMemoryUsed}
	if r.Info.OnCPU() {
		tags = append(tags, rundir.TagMemoryHost, rundir.TagRSS)
	}
	for _, t := range tags {
		s := r.Get(t)
		if s == nil {
			continue
		}
		if v, step, has := s.Max(); has && (!ok || v > m.value) {
			m, ok = measured{value: v, step: step, from: t}, true
		}
	}
	return m, ok
}

// capacity is the memory the run could use: deepgo_run.json's figure, else
// the GPU's total.
func capacity(r *rundir.Run) (m measured, ok bool) {
	if r.Info != nil && r.Info.MemoryCapacityBytes > 0 {
		return measured{value: float64(r.Info.MemoryCapacityBytes), from: "deepgo_run.json memory_capacity_bytes"}, true
	}
	if s := r.Get(rundir.TagGPUMemoryTotal); s != nil {
		if v, step, has := s.Max(); has && v > 0 {
			return measured{value: v, step: step, from: rundir.TagGPUMemoryTotal}, true
		}
	}
	return measured{}, false
}

// commTime is the mean communication and step time per step, from deepgo's
// tags or else DeepSpeed's wall_clock_breakdown ones. The first step is left
// out when there are more: it pays for one-time setup (allocation, first
// collectives), not for the steady state a tuning change affects.
type commTime struct {
	comm, step float64
	from       string
	first, n   int64
}

func measureComm(r *rundir.Run) (c commTime, ok bool) {
	if comm, step := r.Get(rundir.TagCommTimeMS), r.Get(rundir.TagStepTimeMS); comm != nil && step != nil {
		return meanRatio(comm, []*rundir.Series{step}, rundir.TagCommTimeMS+" / "+rundir.TagStepTimeMS)
	}
	parts := []*rundir.Series{r.Get(rundir.TagForwardMS), r.Get(rundir.TagBackwardMS), r.Get(rundir.TagStepMS)}
	if reduce := r.Get(rundir.TagBackwardReduceMS); reduce != nil && parts[0] != nil && parts[1] != nil && parts[2] != nil {
		return meanRatio(reduce, parts, rundir.TagBackwardReduceMS+" / (forward + backward + step)")
	}
	return commTime{}, false
}

// meanRatio averages num and the sum of den over the steps all of them have.
func meanRatio(num *rundir.Series, den []*rundir.Series, from string) (c commTime, ok bool) {
	c.from = from
	skipFirst := num.Len() > 1
	for i, step := range num.Steps {
		if skipFirst && i == 0 {
			continue
		}
		total, all := 0.0, true
		for _, d := range den {
			v, has := d.At(step)
			all = all && has && finite(v)
			total += v
		}
		if !all || !finite(num.Values[i]) {
			continue
		}
		if c.n == 0 {
			c.first = step
		}
		c.comm += num.Values[i]
		c.step += total
		c.n++
	}
	if c.n == 0 || c.step <= 0 {
		return commTime{}, false
	}
	c.comm /= float64(c.n)
	c.step /= float64(c.n)
	return c, true
}

// overflowSteps are the steps skipped for overflow: the overflow tag where
// the run has it, else the increments of the cumulative skipped count.
func overflowSteps(r *rundir.Run) (steps []int64, total int64, from string, ok bool) {
	if s := r.Get(rundir.TagOverflow); s != nil {
		for i, v := range s.Values {
			if v >= 0.5 {
				steps = append(steps, s.Steps[i])
			}
		}
		return steps, int64(s.Len()), rundir.TagOverflow, true
	}
	if s := r.Get(rundir.TagSkippedSteps); s != nil {
		prev := 0.0
		for i, v := range s.Values {
			if v > prev {
				steps = append(steps, s.Steps[i])
			}
			prev = v
		}
		return steps, int64(s.Len()), rundir.TagSkippedSteps, true
	}
	return nil, 0, "", false
}

// calibration is how many overflows open the run back to back from step 1:
// the dynamic scaler starting at 2^initial_scale_power halves until the
// gradients fit, which is expected, not a storm.
func calibration(steps []int64) int {
	n := 0
	for n < len(steps) && steps[n] == int64(n+1) {
		n++
	}
	return n
}

// longestStreak is the longest run of consecutive steps in steps (sorted).
func longestStreak(steps []int64) (n int, from int64) {
	cur := 0
	for i, s := range steps {
		if i > 0 && s == steps[i-1]+1 {
			cur++
		} else {
			cur = 1
		}
		if cur > n {
			n, from = cur, s-int64(cur)+1
		}
	}
	return n, from
}

// spike is a step whose loss jumped above the median of the steps before it.
type spike struct {
	step         int64
	loss, median float64
}

// lossSpikes finds the steps whose loss is not finite or is SpikeRatio times
// the median of up to SpikeWindow finite losses before it (at least
// SpikeMinHistory).
func lossSpikes(s *rundir.Series) []spike {
	var out []spike
	var window []float64
	for i, v := range s.Values {
		if len(window) >= SpikeMinHistory {
			m := median(window)
			if !finite(v) || m > 0 && v > SpikeRatio*m {
				out = append(out, spike{step: s.Steps[i], loss: v, median: m})
				continue // a spike does not raise the bar for the next step
			}
		}
		if finite(v) {
			window = append(window, v)
			if len(window) > SpikeWindow {
				window = window[1:]
			}
		}
	}
	return out
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func stepRange(steps []int64) string {
	if len(steps) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d-%d", steps[0], steps[len(steps)-1])
}
