package deepgo

// The engine's share of DeepSpeed's profilers: comms_logger wraps the
// data-parallel comm (package comm/commslog), flops_profiler times every
// module's forward at flops_profiler.profile_step and prints DeepSpeed's
// report (package monitor/flops).

import (
	"fmt"
	"io"
	"time"

	"github.com/deepgo-ml/deepgo/comm/commslog"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor/flops"
)

// flopsRun is the profile of one step in progress.
type flopsRun struct {
	step    int
	mb      model.MicroBatch
	lat     map[string]time.Duration
	timers0 Timers
	t0      time.Time
	open    bool // the profiled micro-batch's Forward is running
}

// startCommsLogger wraps the engine's comm with comms_logger when the
// config enables it.
func (e *Engine) startCommsLogger() error {
	l, err := newCommsLogger(e.cfg, e.log)
	if l != nil {
		e.comms, e.c = l, l.Wrap(e.c)
	}
	return err
}

// newCommsLogger is comms_logger's Logger, printing to log; nil when the
// config leaves it off.
func newCommsLogger(cfg *config.Config, log io.Writer) (*commslog.Logger, error) {
	if !cfg.CommsLogger.Enabled {
		return nil, nil
	}
	o, err := commslog.FromConfig(cfg.CommsLogger)
	if err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	o.Log = log
	l, err := commslog.New(o)
	if err != nil {
		return nil, fmt.Errorf("deepgo.Initialize: %w", err)
	}
	return l, nil
}

// CommsSummary writes comms_logger's summary table (DeepSpeed's
// log_summary) to w; without comms_logger.enabled it says so.
func (e *Engine) CommsSummary(w io.Writer) error {
	if e.comms == nil {
		return fmt.Errorf("deepgo: CommsSummary: comms_logger.enabled is false")
	}
	return e.comms.Summary(w)
}

// profiling reports whether the micro-step Forward is starting belongs to
// flops_profiler.profile_step: DeepSpeed profiles on rank 0 the forwards
// that run while global_steps equals profile_step (each resets the profile,
// so its report holds the last micro-batch's); deepgo times the first, the
// same modules on a micro-batch of the same size.
func (e *Engine) profiling() bool {
	fp := e.cfg.FlopsProfiler
	return fp.Enabled && e.reportRank() == 0 && e.globalSteps == fp.ProfileStep && e.microSteps%e.batch.GradAccum == 0
}

// beginFlops starts the profile of this step's first micro-batch.
func (e *Engine) beginFlops(mb model.MicroBatch) {
	e.flops = &flopsRun{step: e.globalSteps + 1, mb: mb, lat: map[string]time.Duration{}, timers0: e.Timers(), t0: time.Now(), open: true}
}

// endFlops prints the report once the profiled step is over.
func (e *Engine) endFlops() error {
	f := e.flops
	e.flops = nil
	mods := make([]model.Module, len(e.mods))
	copy(mods, e.mods)
	r, err := flops.Build(f.step, mods, f.mb, f.lat)
	if err != nil {
		return fmt.Errorf("deepgo: flops_profiler: %w", err)
	}
	t := e.Timers()
	r.World, r.DataParallel, r.ModelParallel, r.MicroBatch = e.c.Size(), e.c.Size(), 1, e.batch.MicroBatch
	r.Forward, r.Backward, r.StepTime = t.Forward-f.timers0.Forward, t.Backward-f.timers0.Backward, time.Since(f.t0)
	r.RecomputeFwdFactor = e.cfg.FlopsProfiler.RecomputeFwdFactor
	e.flopsReport = r
	if err := flops.Print(e.cfg.FlopsProfiler, r, e.log); err != nil {
		return fmt.Errorf("deepgo: flops_profiler: %w", err)
	}
	return nil
}

// FlopsProfile is the flops_profiler report of profile_step once that
// step is over (rank 0; nil before, elsewhere, or when disabled).
func (e *Engine) FlopsProfile() *flops.Report { return e.flopsReport }
