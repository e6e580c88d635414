package deepgo

// The engine's monitor: built from the config's tensorboard, csv_monitor,
// wall_clock_breakdown and steps_per_print sections (package monitor) and
// fed by Step once per optimizer step (TrainBatch's or the trainer's own
// loop of Forward, Backward and Step), as DeepSpeed's engine feeds
// its monitors, with GPU telemetry (package monitor/gpu) on CUDA.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/monitor/gpu"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// WithMonitorOptions passes opts to the monitor the engine builds from the
// config: monitor.WithWriter for a /metrics server (monitor.ServeMetrics),
// monitor.WithFiniteCheck(n, nil) for another NaN/Inf check interval.
func WithMonitorOptions(opts ...monitor.Option) Option {
	return func(o *options) { o.monitor = append(o.monitor, opts...) }
}

// startMonitor builds the engine's monitor (every rank: the NaN/Inf check
// is a collective; rank 0 writes) and, on a GPU, its telemetry.
func (e *Engine) startMonitor(extra []monitor.Option) error {
	var capacity int64
	var err error
	if e.gpu, capacity, err = deviceTelemetry(e.be.Device(), &e.notes); err != nil {
		return err
	}
	opts := append([]monitor.Option{monitor.WithLog(e.log), monitor.WithMemoryCapacity(capacity),
		monitor.WithFiniteCheck(0, func(ctx context.Context) (bool, error) { return nonfiniteMasters(ctx, e.be, e.z, e.c) })}, extra...)
	m, err := monitor.New(e.cfg, e.reportRank(), opts...)
	if err != nil {
		return fmt.Errorf("deepgo.Initialize: %w", err)
	}
	e.mon = m
	e.notes = append(e.notes, m.Notes()...)
	return nil
}

// startRunInfo writes deepgo_run.json as both engines' Initialize ends,
// on the rank whose monitor has run directories (rank 0 with csv_monitor
// or tensorboard): the resolved config, the world's size, the device, the
// model's parameter count, the memory capacity and the steps so far (the
// monitor adds train_batch_size and train_loss_after_step), so that a
// library run's directory reads back on steps (rundir) and diagnoses
// (doctor) as deepgo train's does. The verdict is agreed over groups in
// turn (each a comm every rank calls, nil or of one rank skipped), so a
// run directory refused for holding another run's batch fails Initialize
// on every rank at once. Without csv_monitor and tensorboard (the ranks
// agreed on the config) there is nothing to write or agree on.
func startRunInfo(ctx context.Context, m *monitor.Monitor, cfg *config.Config, info monitor.RunInfo, groups ...comm.Comm) error {
	if !cfg.CSVMonitor.Enabled && !cfg.Tensorboard.Enabled {
		return nil
	}
	var err error
	if m != nil && len(m.RunDirs()) > 0 {
		var b []byte
		if b, err = cfg.JSON(); err == nil {
			info.Config, info.MemoryCapacityBytes = b, m.MemoryCapacity()
			err = m.WriteRunInfo(info)
		}
		if err != nil {
			err = fmt.Errorf("deepgo.Initialize: %w", err)
		}
	}
	for _, g := range groups {
		if g != nil && g.Size() > 1 {
			err = agreeOn(ctx, g, "Initialize: deepgo_run.json", err)
		}
	}
	return err
}

// numParams counts the elements of shapes.
func numParams(shapes ...[]int) int64 {
	var n int64
	for _, s := range shapes {
		k := int64(1)
		for _, d := range s {
			k *= int64(d)
		}
		n += k
	}
	return n
}

// deviceTelemetry is the monitor's view of dev for both engines: the
// memory its target divides by (the host's RAM on the CPU and the
// simulated device, whose memory is host memory; the GPU's) and, on a GPU
// with NVML, its telemetry (nil otherwise, with a note added to notes
// saying why).
func deviceTelemetry(dev tensor.Device, notes *[]string) (*gpu.Telemetry, int64, error) {
	switch dev.Kind {
	case tensor.KindCPU, tensor.KindSim:
		return nil, monitor.HostMemoryBytes(), nil // sim memory is host memory
	case tensor.KindCUDA:
		t, err := gpu.Open(nil, dev.Index)
		if err != nil {
			return nil, 0, fmt.Errorf("deepgo.Initialize: GPU telemetry: %w", err)
		}
		if !t.Available() {
			*notes = append(*notes, t.Note())
			return nil, 0, nil
		}
		var capacity int64
		if ss, err := t.Sample(); err == nil && len(ss) == 1 {
			capacity = int64(ss[0].MemoryTotalBytes)
		}
		return t, capacity, nil
	}
	return nil, 0, nil
}

// gpuRecord is the GPU's sample for the monitor's record of step (nil
// without telemetry): once per print interval, as NVML reads cost tens
// of microseconds.
func gpuRecord(t *gpu.Telemetry, m *monitor.Monitor, step int) *monitor.GPU {
	if t == nil || step != 1 && step%m.PrintEvery() != 0 {
		return nil
	}
	ss, err := t.Sample()
	if err != nil || len(ss) != 1 {
		return nil
	}
	s := ss[0]
	return &monitor.GPU{MemoryUsedBytes: s.MemoryUsedBytes, MemoryTotalBytes: s.MemoryTotalBytes,
		UtilizationPct: s.UtilizationPct, PowerW: s.PowerW, TemperatureC: s.TemperatureC}
}

// Monitor is the engine's monitor: its run directories, its warnings, and
// WriteRunInfo for a trainer that knows more of the run.
func (e *Engine) Monitor() *monitor.Monitor { return e.mon }

// startRunInfo is startRunInfo for the data-parallel engine: the world is
// its data-parallel group times its TP group, the parameters counted at
// their full (unsharded) shapes, each once.
func (e *Engine) startRunInfo(ctx context.Context) error {
	_, tpN := e.tpDegree()
	seen := map[string]bool{}
	var shapes [][]int
	for _, ps := range append(slices.Clip(e.params), e.frozenList()) { // frozen ones count too
		for _, p := range ps {
			if !seen[p.Name] {
				seen[p.Name] = true
				shapes = append(shapes, e.fullShape(p))
			}
		}
	}
	info := monitor.RunInfo{World: e.c.Size() * tpN, Device: e.be.Device().String(), Params: numParams(shapes...), Steps: int64(e.globalSteps)}
	return startRunInfo(ctx, e.mon, e.cfg, info, e.c, e.tp)
}

// nonfiniteMasters reports whether any rank of c holds NaN or Inf in its
// fp32 master shard of z: each rank checks what it owns on be's device,
// then the ranks agree (the monitor's NaN/Inf check, a collective).
func nonfiniteMasters(ctx context.Context, be backend.Backend, z *zero.Optimizer, c comm.Comm) (bool, error) {
	var mine []*tensor.Tensor
	for u := range z.Layout().Units {
		mine = append(mine, z.Master(u))
	}
	bad, err := be.NonFinite(mine)
	if err != nil {
		return false, err
	}
	flag := int64(0)
	if bad {
		flag = 1
	}
	all, err := comm.AllGatherInt64s(ctx, c, []int64{flag})
	if err != nil {
		return false, err
	}
	for _, f := range all {
		if f != 0 {
			return true, nil
		}
	}
	return false, nil
}

// stepAcc adds up the micro-steps of an optimizer step for the monitor:
// when its first Forward started, its losses on this rank, its tokens.
type stepAcc struct {
	t0     time.Time
	loss   float64
	tokens int64
	n      int
}

// add counts a micro-step of loss and tokens.
func (a *stepAcc) add(loss float64, tokens int64) {
	a.loss += loss
	a.tokens += tokens
	a.n++
}

// meanLoss is the mean loss of the micro-steps counted.
func (a *stepAcc) meanLoss() float64 { return a.loss / float64(max(a.n, 1)) }

// logMicroStep prints wall_clock_breakdown's line of the micro-step Step
// just ended (on the reporting rank), as DeepSpeed prints its micro timers
// at every micro-step, before the optimizer step's line.
func (e *Engine) logMicroStep() {
	t := e.Timers()
	dt := t.sub(e.microTimers)
	e.microTimers = t
	if (e.cfg.WallClockBreakdown || e.cfg.FlopsProfiler.Enabled) && e.reportRank() == 0 {
		fmt.Fprintln(e.log, monitor.MicroBreakdownLine(0, dt.monitor()))
	}
}

// sub is t - u, field by field.
func (t Timers) sub(u Timers) Timers {
	return Timers{t.Forward - u.Forward, t.Backward - u.Backward, t.Comm - u.Comm, t.Reduce - u.Reduce, t.Optimizer - u.Optimizer, t.Step - u.Step}
}

// monitor is t as the monitor's Timers.
func (t Timers) monitor() monitor.Timers {
	return monitor.Timers{Forward: t.Forward, Backward: t.Backward, Comm: t.Comm, Reduce: t.Reduce, Optimizer: t.Optimizer, Step: t.Step}
}

// observe reports the optimizer step Step just took (its mean loss over
// the micro-batches and ranks, its time since its first Forward, this
// rank's tokens) to the monitor.
func (e *Engine) observe(ctx context.Context, loss float64, took time.Duration, tokens int64) error {
	if e.mon == nil {
		return nil
	}
	mem, t := e.Memory(), e.Timers()
	r := monitor.Record{Step: e.globalSteps, Loss: loss, LR: e.LR(), LossScale: e.LossScale(),
		SkippedSteps: e.skippedSteps, Overflow: !e.stepApplied, GradNorm: e.gradNorm,
		Timers:   t.monitor(),
		StepTime: took, Tokens: tokens * int64(e.c.Size()), HostBytes: mem.HostBytes, DeviceBytes: mem.DeviceBytes, PeakBytes: mem.Peak}
	if e.ck != nil && e.ck.cfg.Profile {
		st := e.ck.stats
		r.Checkpoint = &monitor.Checkpoint{Recompute: st.Recompute - e.ck.monRecompute, SavedBytes: st.SavedBytes, SavedHostBytes: st.SavedHostBytes}
		e.ck.monRecompute = st.Recompute
	}
	r.GPU = gpuRecord(e.gpu, e.mon, r.Step)
	if err := e.mon.Observe(ctx, r); err != nil {
		return fmt.Errorf("deepgo: monitor: %w", err)
	}
	return nil
}

// batchTokens counts the tokens of data: B×T of each token batch, the
// samples of any other sized input.
func batchTokens(data []model.MicroBatch) int64 {
	var tokens int64
	for _, mb := range data {
		switch b := mb.Input.(type) {
		case model.TokenBatch:
			tokens += int64(b.B * b.T)
		case model.Sized:
			tokens += int64(b.BatchSize())
		}
	}
	return tokens
}

// closeMonitor flushes the monitor's files and ends the telemetry.
func (e *Engine) closeMonitor() error { return closeMonitors(&e.mon, &e.gpu) }

// closeMonitors is both engines' closeMonitor: it closes the monitor and
// the GPU telemetry an engine holds, clearing both.
func closeMonitors(mon **monitor.Monitor, t **gpu.Telemetry) error {
	var errs []error
	if *mon != nil {
		errs = append(errs, (*mon).Close())
		*mon = nil
	}
	if *t != nil {
		errs = append(errs, (*t).Close())
		*t = nil
	}
	return errors.Join(errs...)
}
