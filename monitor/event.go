package monitor

import (
	"math"
	"slices"
	"strconv"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/rundir"
)

// Event is one scalar of one step under a tag.
type Event struct {
	Tag   string
	Value float64
	// Step is the x value the event is written at (csv_monitor's step
	// column, tensorboard's step): rundir.XAxis.X of the optimizer step,
	// which is DeepSpeed's global_samples for a Train/Samples tag and the
	// optimizer step for deepgo's own.
	Step int64
	// Int marks a count (bytes, steps, 0/1 flags): written without a
	// fraction, as Python writes an int.
	Int bool
}

// Writer receives each step's events, in tag order as the Monitor builds
// them; step is the optimizer step, each event's own x value is Event.Step.
// Close must write out whatever the Writer buffers: the Monitor's Close
// calls it, also when a signal interrupts the run.
type Writer interface {
	WriteEvents(step int, events []Event) error
	Close() error
}

// The contract's tags: rundir's, the one definition a writer and a reader
// of the run directory share.
const (
	TagLoss              = rundir.TagLoss
	TagEvalLoss          = rundir.TagEvalLoss
	TagLR                = rundir.TagLR
	TagLossScale         = rundir.TagLossScale
	TagForward           = rundir.TagForwardMS
	TagBackward          = rundir.TagBackwardMS
	TagBackwardInner     = rundir.TagBackwardInnerMS
	TagBackwardAllreduce = rundir.TagBackwardReduceMS
	TagStepElapsed       = rundir.TagStepMS
	TagGradNorm          = rundir.TagGradNorm
	TagSkippedSteps      = rundir.TagSkippedSteps
	TagOverflow          = rundir.TagOverflow
	TagTokensPerS        = rundir.TagTokensPerS
	TagStepTime          = rundir.TagStepTimeMS
	TagCommTime          = rundir.TagCommTimeMS
	TagOptimizerTime     = rundir.TagOptimizerTimeMS
	TagMemoryHost        = rundir.TagMemoryHost
	TagMemoryDevice      = rundir.TagMemoryDevice
	TagMemoryPeak        = rundir.TagMemoryPeak
	TagRSS               = rundir.TagRSS
	TagNonfinite         = rundir.TagNonfiniteParams
	TagCkptRecompute     = rundir.TagCheckpointRecomputeMS
	TagCkptSaved         = rundir.TagCheckpointSavedBytes
	TagCkptHost          = rundir.TagCheckpointHostBytes
	TagGPUMemoryUsed     = rundir.TagGPUMemoryUsed
	TagGPUMemoryTotal    = rundir.TagGPUMemoryTotal
	TagGPUUtilization    = rundir.TagGPUUtilization
	TagGPUPower          = rundir.TagGPUPower
	TagGPUTemperature    = rundir.TagGPUTemperature
)

func ms(d float64) float64 { return d / 1e6 }

// events turns one step (dt: its timer deltas) into the contract's tags,
// each at its x value on axis; loss_scale only under fp16, as DeepSpeed's
// engines write it (bf16 and fp32 have no loss scaler).
func events(r Record, dt Timers, rss int64, breakdown, fp16 bool, nonfinite *bool, axis rundir.XAxis) []Event {
	ev := tagEvents(r, dt, rss, breakdown, nonfinite)
	if !fp16 {
		ev = slices.DeleteFunc(ev, func(e Event) bool { return e.Tag == TagLossScale })
	}
	for i := range ev {
		ev[i].Step = axis.X(ev[i].Tag, int64(r.Step))
	}
	return ev
}

func tagEvents(r Record, dt Timers, rss int64, breakdown bool, nonfinite *bool) []Event {
	ev := []Event{
		{Tag: TagLoss, Value: r.Loss},
		{Tag: TagLR, Value: r.LR},
		{Tag: TagLossScale, Value: r.LossScale},
	}
	if breakdown {
		b := derivedBreakdown(dt)
		if r.Breakdown != nil {
			b = *r.Breakdown
		}
		ev = append(ev,
			Event{Tag: TagForward, Value: ms(float64(b.Forward))},
			Event{Tag: TagBackward, Value: ms(float64(b.Backward))},
			Event{Tag: TagBackwardInner, Value: ms(float64(b.BackwardInner))},
			Event{Tag: TagBackwardAllreduce, Value: ms(float64(b.BackwardAllreduce))},
			Event{Tag: TagStepElapsed, Value: ms(float64(b.Step))})
	}
	tps := 0.0
	if r.StepTime > 0 {
		tps = float64(r.Tokens) / r.StepTime.Seconds()
	}
	ev = append(ev,
		Event{Tag: TagGradNorm, Value: r.GradNorm},
		Event{Tag: TagSkippedSteps, Value: float64(r.SkippedSteps), Int: true},
		Event{Tag: TagOverflow, Value: b2f(r.Overflow), Int: true},
		Event{Tag: TagTokensPerS, Value: tps},
		Event{Tag: TagStepTime, Value: ms(float64(r.StepTime))},
		Event{Tag: TagCommTime, Value: ms(float64(dt.Comm))},
		Event{Tag: TagOptimizerTime, Value: ms(float64(dt.Optimizer))},
		Event{Tag: TagMemoryHost, Value: float64(r.HostBytes), Int: true},
		Event{Tag: TagMemoryDevice, Value: float64(r.DeviceBytes), Int: true},
		Event{Tag: TagMemoryPeak, Value: float64(r.PeakBytes), Int: true},
		Event{Tag: TagRSS, Value: float64(rss), Int: true})
	if nonfinite != nil {
		ev = append(ev, Event{Tag: TagNonfinite, Value: b2f(*nonfinite), Int: true})
	}
	if c := r.Checkpoint; c != nil {
		ev = append(ev,
			Event{Tag: TagCkptRecompute, Value: ms(float64(c.Recompute))},
			Event{Tag: TagCkptSaved, Value: float64(c.SavedBytes), Int: true},
			Event{Tag: TagCkptHost, Value: float64(c.SavedHostBytes), Int: true})
	}
	if g := r.GPU; g != nil {
		ev = append(ev,
			Event{Tag: TagGPUMemoryUsed, Value: float64(g.MemoryUsedBytes), Int: true},
			Event{Tag: TagGPUMemoryTotal, Value: float64(g.MemoryTotalBytes), Int: true},
			Event{Tag: TagGPUUtilization, Value: g.UtilizationPct},
			Event{Tag: TagGPUPower, Value: g.PowerW},
			Event{Tag: TagGPUTemperature, Value: g.TemperatureC})
	}
	return ev
}

// derivedBreakdown is the data-parallel engine's step as DeepSpeed's
// global timers: DeepSpeed's bwd is its whole backward call, gradient
// reduction included; deepgo times module backwards (inner) and the
// reduction (collectives plus bucket work) apart, wherever the reduction
// ran.
func derivedBreakdown(dt Timers) Breakdown {
	inner, allreduce := dt.Backward, dt.Comm+dt.Reduce
	return Breakdown{Forward: dt.Forward, Backward: inner + allreduce, BackwardInner: inner, BackwardAllreduce: allreduce, Step: dt.Step}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// text formats an event's value for the csv file: counts as integers,
// the rest as Python's repr(float), which DeepSpeed's csv monitor writes.
func (e Event) text() string {
	if e.Int && !math.IsNaN(e.Value) && !math.IsInf(e.Value, 0) {
		return strconv.FormatInt(int64(e.Value), 10)
	}
	return config.PyFloatRepr(e.Value)
}
