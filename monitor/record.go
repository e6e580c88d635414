package monitor

import "time"

// Timers is the engine's wall-clock split, cumulative since the engine
// started (as deepgo.Engine.Timers returns it); the Monitor takes the
// difference between consecutive Records to get one step's times.
type Timers struct {
	Forward   time.Duration // module forwards and the loss
	Backward  time.Duration // module backwards, reduction hooks excluded
	Comm      time.Duration // issuing and waiting on collectives
	Reduce    time.Duration // bucket casts, scaling, accumulation
	Optimizer time.Duration // the fused optimizer step
	Step      time.Duration // the whole boundary step
}

func (t Timers) sub(u Timers) Timers {
	return Timers{t.Forward - u.Forward, t.Backward - u.Backward, t.Comm - u.Comm,
		t.Reduce - u.Reduce, t.Optimizer - u.Optimizer, t.Step - u.Step}
}

// Breakdown is one step's times of DeepSpeed's global timers (fwd, bwd,
// bwd_inner, bwd_allreduce, step), as an engine that keeps them itself
// measured them: the elapsed_time_ms tags take them as they are.
type Breakdown struct {
	Forward, Backward, BackwardInner, BackwardAllreduce, Step time.Duration
}

// GPU is one device's telemetry at the step (zero fields are unknown).
type GPU struct {
	MemoryUsedBytes, MemoryTotalBytes uint64
	UtilizationPct                    float64
	PowerW                            float64
	TemperatureC                      float64
}

// Record is what one optimizer step reports.
type Record struct {
	// Step is the global optimizer step, 1-based, skipped steps included.
	Step int
	// Loss is the step's mean loss (over micro-batches and ranks).
	Loss float64
	// LR is the learning rate; LossScale the loss scale (1 without fp16).
	LR, LossScale float64
	// SkippedSteps counts overflowed steps so far; Overflow says this one did.
	SkippedSteps int
	Overflow     bool
	// GradNorm is the unscaled global gradient norm of the last applied step.
	GradNorm float64
	// Timers is the engine's cumulative split (see Timers).
	Timers Timers
	// Breakdown is this step's wall_clock_breakdown times where the
	// engine times DeepSpeed's phases itself (the pipeline engine:
	// DeepSpeed's PipelineEngine timers); nil derives them from Timers.
	Breakdown *Breakdown
	// StepTime is this step's wall time: every micro-batch's forward,
	// backward and the boundary step, as the loop measured it.
	StepTime time.Duration
	// Tokens is the number of tokens this step trained on, all ranks.
	Tokens int64
	// HostBytes, DeviceBytes and PeakBytes are the engine's accounting
	// (zero.Memory's HostBytes, DeviceBytes and Peak).
	HostBytes, DeviceBytes, PeakBytes int64
	// GPU is the device's telemetry, nil where there is none.
	GPU *GPU
	// Checkpoint is activation checkpointing's cost this step, with
	// activation_checkpointing.profile; nil otherwise.
	Checkpoint *Checkpoint
}

// Checkpoint is one step's activation checkpointing cost on this rank.
type Checkpoint struct {
	// Recompute is the time spent recomputing checkpointed forwards.
	Recompute time.Duration
	// SavedBytes and SavedHostBytes are the boundary activations the last
	// micro-step kept on the device and in host memory.
	SavedBytes, SavedHostBytes int64
}
