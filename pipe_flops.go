package deepgo

// The pipeline engine's flops_profiler. DeepSpeed's profiler hooks the
// module on global rank 0 only, so under a pipeline it sees stage 0's
// layers; its PipelineEngine never prints the report (print_model_profile
// is called from DeepSpeedEngine.step, which the PipelineEngine replaces),
// and each forward resets the profile, keeping the last micro-batch's. Here
// the world's rank 0 (stage 0) times its modules' forwards on the batch's
// first micro-batch at profile_step and prints the report for its own
// stage's modules once the batch is over: the report DeepSpeed's
// data-parallel engine prints, for what a pipeline's rank 0 holds.

import (
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor/flops"
)

// beginFlops starts the profile when this batch is profile_step's on the
// world's rank 0.
func (e *PipeEngine) beginFlops(data []model.MicroBatch) {
	fp := e.cfg.FlopsProfiler
	if !fp.Enabled || e.world.Rank() != 0 || e.globalSteps != fp.ProfileStep || len(data) == 0 {
		return
	}
	e.flops = &flopsRun{step: e.globalSteps + 1, mb: data[0], lat: map[string]time.Duration{}, timers0: e.Timers(), t0: time.Now()}
}

// flopsTime adds d to module m's forward latency when micro-batch mb is the
// profiled one.
func (e *PipeEngine) flopsTime(mb, m int, d time.Duration) {
	if e.flops != nil && mb == 0 {
		e.flops.lat[e.mods[m].Name()] += d
	}
}

// endFlops prints the report of the profiled batch.
func (e *PipeEngine) endFlops() error {
	f := e.flops
	if f == nil {
		return nil
	}
	e.flops = nil
	r, err := flops.Build(f.step, append([]model.Module(nil), e.mods...), f.mb, f.lat)
	if err != nil {
		return fmt.Errorf("deepgo: flops_profiler: %w", err)
	}
	t := e.Timers()
	r.World, r.DataParallel, r.ModelParallel, r.MicroBatch = e.world.Size(), e.batch.DataParallel, e.tpSize(), e.batch.MicroBatch
	r.Forward, r.Backward, r.StepTime = t.Forward-f.timers0.Forward, t.Backward-f.timers0.Backward, time.Since(f.t0)
	r.RecomputeFwdFactor = e.cfg.FlopsProfiler.RecomputeFwdFactor
	r.Notes = append(r.Notes, fmt.Sprintf("pipeline stage %d of %d: its own modules only (DeepSpeed's profiler hooks global rank 0's, and its PipelineEngine prints no report)", e.stage, e.stages))
	e.flopsReport = r
	if err := flops.Print(e.cfg.FlopsProfiler, r, e.log); err != nil {
		return fmt.Errorf("deepgo: %w", err) // Print's errors name flops_profiler's key
	}
	return nil
}

// FlopsProfile is the flops_profiler report of profile_step once that
// batch is over (the world's rank 0, stage 0's modules; nil before,
// elsewhere, or when disabled).
func (e *PipeEngine) FlopsProfile() *flops.Report { return e.flopsReport }
