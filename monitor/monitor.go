package monitor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/rundir"
)

// FiniteCheck reports whether any parameter holds NaN or Inf. The Monitor
// calls it on every rank at the same steps, so it may be a collective.
type FiniteCheck func(ctx context.Context) (nonfinite bool, err error)

// Option configures New.
type Option func(*Monitor)

// WithFiniteCheck sets the NaN/Inf check and its interval in steps
// (every <= 0 keeps the default, DefaultFiniteCheckEvery; a nil check
// keeps the one set before, so that a caller can change the interval of
// the engine's check).
func WithFiniteCheck(every int, check FiniteCheck) Option {
	return func(m *Monitor) {
		if every > 0 {
			m.finiteEvery = every
		}
		if check != nil {
			m.check = check
		}
	}
}

// WithPrintEvery sets the interval of the target checks; the default is
// steps_per_print, or 50 when the config leaves it unset, as deepgo train
// prints. The data-parallel engine's wall_clock_breakdown lines come every
// step, as DeepSpeed's; the pipeline engine's every steps_per_print, or
// this interval when the config leaves it unset.
func WithPrintEvery(n int) Option {
	return func(m *Monitor) {
		if n > 0 {
			m.printEvery = n
		}
	}
}

// WithLog sets where rank 0 prints the wall_clock_breakdown lines of the
// optimizer steps and the target warnings (default: nowhere); the engine
// prints the micro-steps' lines (MicroBreakdownLine).
func WithLog(w io.Writer) Option { return func(m *Monitor) { m.log = w } }

// WithoutBreakdownLines leaves the wall_clock_breakdown lines to the
// engine: the pipeline engine prints DeepSpeed's PipelineEngine timers
// (batch_input, the pipe_* transfers) at its moments, where the Monitor
// would print the data-parallel engine's global line at every step.
func WithoutBreakdownLines() Option { return func(m *Monitor) { m.noLines = true } }

// WithWriter adds a writer rank 0 sends every step's events to (a
// MetricsServer, say); the caller keeps it and closes it.
func WithWriter(w Writer) Option { return func(m *Monitor) { m.extra = append(m.extra, w) } }

// WithMemoryCapacity sets the bytes the memory target divides by: the
// host's RAM on the CPU, the device's memory on a GPU. Without it (or 0)
// the memory target is not checked.
func WithMemoryCapacity(bytes int64) Option { return func(m *Monitor) { m.capacity = bytes } }

// WithTrainLossAfterStep writes train_loss at the global_samples of its
// step's end, beside lr, as DeepSpeed's PipelineEngine does (the
// data-parallel engines write it one batch earlier, before the update:
// deepgo's, and DeepSpeed's of earlier releases, 0.19.8's writing none;
// rundir.XAxis). The pipeline engine sets it; deepgo_run.json records it.
func WithTrainLossAfterStep() Option { return func(m *Monitor) { m.lossAfter = true } }

// Monitor turns each step's Record into events for its writers, prints
// DeepSpeed's wall_clock_breakdown lines, runs the NaN/Inf check and
// checks the §6 targets. Its methods must be called from one goroutine,
// except Close, which any goroutine may call at any time; rank 0 hands each
// step to a goroutine of its own that writes it, so a writer's error is
// returned by a later Observe or by Close.
type Monitor struct {
	rank        int
	batch       int  // train_batch_size: the samples per step, for the Train/Samples x values
	lossAfter   bool // WithTrainLossAfterStep
	fp16        bool // fp16.enabled: loss_scale is written
	breakdown   bool
	noLines     bool // WithoutBreakdownLines
	printEvery  int
	finiteEvery int
	check       FiniteCheck
	log         io.Writer
	capacity    int64

	writers []Writer // owned: closed by Close
	extra   []Writer // the caller's
	runDirs []string
	notes   []string

	prev     Timers
	win      window
	memory   target
	comm     target
	update   target
	finite   target
	warnings []string

	infoMu sync.Mutex // guards step and info, and serializes deepgo_run.json's writes
	step   int        // the last step Observe took
	info   *RunInfo   // the last deepgo_run.json written (WriteRunInfo)

	qmu       sync.Mutex    // guards queue: Close may run beside Observe
	queue     chan batch    // rank 0's steps on their way to the writers; nil once Close began
	flushed   chan struct{} // closed when the writer goroutine has stopped
	closeOnce sync.Once
	closeErr  error
	errMu     sync.Mutex
	werrs     []error // the writers' errors since the last Observe
}

// batch is one step for the writer goroutine.
type batch struct {
	eval      *float64 // an evaluation's mean loss (ObserveEval): the one event
	r         Record
	dt        Timers
	nonfinite *bool
	axis      rundir.XAxis
}

// New builds rank's Monitor from cfg's tensorboard, csv_monitor, wandb,
// comet, wall_clock_breakdown, steps_per_print and train_batch_size (the
// samples per step; see SetTrainBatchSize). Only rank 0 creates files;
// every rank must call Observe (the NaN/Inf check may be a collective).
// wandb and comet, which deepgo cannot write, become Notes.
func New(cfg *config.Config, rank int, opts ...Option) (_ *Monitor, err error) {
	if cfg == nil {
		return nil, errors.New("monitor.New: cfg is nil")
	}
	m := &Monitor{
		rank:        rank,
		batch:       1,
		breakdown:   cfg.WallClockBreakdown || cfg.FlopsProfiler.Enabled,
		fp16:        cfg.FP16.Enabled,
		printEvery:  50,
		finiteEvery: DefaultFiniteCheckEvery,
		memory:      target{name: "memory in use", unit: "% of capacity", limit: MemoryTargetPct, constant: "MemoryTargetPct"},
		comm:        target{name: "communication share", unit: "% of step time", limit: CommTargetPct, constant: "CommTargetPct"},
		update:      target{name: "parameter update (boundary step) time", unit: " ms", limit: UpdateTargetMs, constant: "UpdateTargetMs"},
		finite:      target{name: "non-finite parameters (NaN/Inf found = 1)", limit: 1, constant: "WithFiniteCheck"},
	}
	if cfg.StepsPerPrint != nil && *cfg.StepsPerPrint > 0 {
		m.printEvery = *cfg.StepsPerPrint
	}
	if cfg.TrainBatchSize != nil && *cfg.TrainBatchSize > 0 {
		m.batch = *cfg.TrainBatchSize
	}
	for _, o := range opts {
		o(m)
	}
	if cfg.Wandb.Enabled {
		m.notes = append(m.notes, "not supported: wandb monitor (wandb.enabled): deepgo writes tensorboard and csv_monitor files and serves Prometheus /metrics; nothing is sent to W&B")
	}
	if cfg.Comet.Enabled {
		m.notes = append(m.notes, "not supported: comet monitor (comet.enabled): deepgo writes tensorboard and csv_monitor files and serves Prometheus /metrics; nothing is sent to Comet")
	}
	if rank != 0 {
		return m, nil
	}
	defer func() {
		if err == nil && len(m.writers)+len(m.extra) > 0 {
			m.startWriting()
		}
	}()
	if c := cfg.CSVMonitor; c.Enabled {
		dir := filepath.Join(c.OutputPath, c.JobName)
		w, err := NewCSVWriter(dir)
		if err != nil {
			return nil, fmt.Errorf("csv_monitor.output_path %q: %w", c.OutputPath, err)
		}
		m.writers = append(m.writers, w)
		m.runDirs = append(m.runDirs, dir)
	}
	if t := cfg.Tensorboard; t.Enabled {
		dir := filepath.Join(t.OutputPath, t.JobName)
		w, err := NewTensorboardWriter(dir)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("tensorboard.output_path %q: %w", t.OutputPath, err)
		}
		m.writers = append(m.writers, w)
		if len(m.runDirs) == 0 || filepath.Clean(m.runDirs[0]) != filepath.Clean(dir) {
			m.runDirs = append(m.runDirs, dir)
		}
	}
	return m, nil
}

// SetTrainBatchSize sets the samples per optimizer step (DeepSpeed's
// train_batch_size, as the engine resolved it): the Train/Samples tags are
// written at global_samples, step × n (rundir.XAxis). Call it before the
// first Observe; n < 1 is ignored. Without it the Monitor takes the
// config's train_batch_size, else 1 (one sample per step).
func (m *Monitor) SetTrainBatchSize(n int) {
	if n > 0 {
		m.batch = n
	}
}

// TrainBatchSize is the samples per step the Train/Samples x values count.
func (m *Monitor) TrainBatchSize() int { return m.batch }

// axis is the x axis the Monitor writes the Train/Samples tags on.
func (m *Monitor) axis() rundir.XAxis {
	return rundir.XAxis{TrainBatchSize: int64(m.batch), LossAfterStep: m.lossAfter}
}

// MemoryCapacity is the bytes the memory target divides by (0: not
// checked).
func (m *Monitor) MemoryCapacity() int64 { return m.capacity }

// PrintEvery is the print interval in steps (WithPrintEvery,
// steps_per_print, else 50).
func (m *Monitor) PrintEvery() int { return m.printEvery }

// Notes lists what the config asked for that the Monitor does not do.
func (m *Monitor) Notes() []string { return append([]string(nil), m.notes...) }

// RunDirs are the run directories rank 0 writes to (csv_monitor's, then
// tensorboard's when different); none on other ranks.
func (m *Monitor) RunDirs() []string { return append([]string(nil), m.runDirs...) }

// Warnings lists the target warnings printed so far.
func (m *Monitor) Warnings() []string { return append([]string(nil), m.warnings...) }

// Observe reports one optimizer step. Every rank calls it once per step.
func (m *Monitor) Observe(ctx context.Context, r Record) error {
	var nonfinite *bool
	if m.check != nil && r.Step%m.finiteEvery == 0 {
		bad, err := m.check(ctx)
		if err != nil {
			return fmt.Errorf("monitor: NaN/Inf check at step %d: %w", r.Step, err)
		}
		nonfinite = &bad
	}
	dt := r.Timers.sub(m.prev)
	m.prev = r.Timers
	m.infoMu.Lock()
	m.step = r.Step
	m.infoMu.Unlock()
	if m.rank != 0 {
		return nil
	}
	errs := m.enqueue(batch{r: r, dt: dt, nonfinite: nonfinite, axis: m.axis()})
	m.win.add(float64(r.StepTime), float64(dt.Comm), float64(dt.Step))
	if nonfinite != nil {
		m.warn(m.finite.check(r.Step, b2f(*nonfinite)))
	}
	if m.breakdown && !m.noLines && m.log != nil {
		// every optimizer step, as DeepSpeed logs its global timers at each
		// accumulation boundary, whatever steps_per_print says
		fmt.Fprintln(m.log, BreakdownLine(0, dt))
	}
	if r.Step%m.printEvery == 0 {
		m.checkTargets(r)
		m.win = window{}
	}
	return errors.Join(errs...)
}

// ObserveEval reports an evaluation's mean loss after step optimizer steps
// (0: before the first): rank 0 writes it as Train/Samples/eval_loss at
// those steps' global_samples, as DeepSpeed's PipelineEngine.eval_batch
// does, and /metrics shows it as deepgo_eval_loss. Any rank may call it
// (the engines' EvalBatch calls it on every rank); it returns the writers'
// errors since the last call, as Observe does.
func (m *Monitor) ObserveEval(step int, loss float64) error {
	if m.rank != 0 {
		return nil
	}
	return errors.Join(m.enqueue(batch{eval: &loss, r: Record{Step: step}, axis: m.axis()})...)
}

// enqueue hands b to the writer goroutine (dropped once Close began) and
// returns the writers' errors since the last call.
func (m *Monitor) enqueue(b batch) []error {
	m.qmu.Lock()
	if m.queue != nil {
		m.queue <- b
	}
	m.qmu.Unlock()
	m.errMu.Lock()
	defer m.errMu.Unlock()
	errs := m.werrs
	m.werrs = nil
	return errs
}

// checkTargets applies the §6 targets to the window since the last print.
func (m *Monitor) checkTargets(r Record) {
	if m.capacity > 0 {
		used := rssBytes()
		switch {
		case r.GPU != nil && r.GPU.MemoryUsedBytes > 0:
			used = int64(r.GPU.MemoryUsedBytes)
		case r.DeviceBytes > 0:
			used = r.DeviceBytes
		}
		m.warn(m.memory.check(r.Step, 100*float64(used)/float64(m.capacity)))
	}
	m.warn(m.comm.check(r.Step, m.win.commPct()))
	m.warn(m.update.check(r.Step, m.win.updateMs()))
}

func (m *Monitor) warn(s string) {
	if s == "" {
		return
	}
	m.warnings = append(m.warnings, s)
	if m.log != nil {
		fmt.Fprintln(m.log, "warning:", s)
	}
}

// BreakdownLine is DeepSpeed's wall_clock_breakdown line for one step's
// times (its global timers: fwd, bwd, bwd_inner, bwd_allreduce, step, in
// ms with two decimals, as log_dist prints it on rank).
func BreakdownLine(rank int, dt Timers) string { return breakdownLine(rank, dt, "") }

// MicroBreakdownLine is DeepSpeed's wall_clock_breakdown line for one
// micro-step's times (its micro timers, fwd_microstep ... step_microstep),
// which it prints at every micro-step, before the step's BreakdownLine at
// an accumulation boundary.
func MicroBreakdownLine(rank int, dt Timers) string { return breakdownLine(rank, dt, "_microstep") }

func breakdownLine(rank int, dt Timers, suffix string) string {
	b := derivedBreakdown(dt)
	line := fmt.Sprintf("[Rank %d] time (ms)", rank)
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"fwd", b.Forward}, {"bwd", b.Backward}, {"bwd_inner", b.BackwardInner}, {"bwd_allreduce", b.BackwardAllreduce}, {"step", b.Step}} {
		line += fmt.Sprintf(" | %s%s: %.2f", t.name, suffix, ms(float64(t.d)))
	}
	return line
}

// startWriting starts the goroutine that turns rank 0's steps into events
// for the writers: formatting and file I/O stay off the training loop
// (its step time is every rank's, since the collectives wait for rank 0).
func (m *Monitor) startWriting() {
	m.queue, m.flushed = make(chan batch, 64), make(chan struct{})
	go func(queue <-chan batch) {
		defer close(m.flushed)
		for b := range queue {
			var ev []Event
			if b.eval != nil {
				ev = []Event{{Tag: TagEvalLoss, Value: *b.eval, Step: b.axis.X(TagEvalLoss, int64(b.r.Step))}}
			} else {
				ev = events(b.r, b.dt, rssBytes(), m.breakdown, m.fp16, b.nonfinite, b.axis)
			}
			var errs []error
			for _, w := range m.writers {
				errs = append(errs, w.WriteEvents(b.r.Step, ev))
			}
			for _, w := range m.extra {
				errs = append(errs, w.WriteEvents(b.r.Step, ev))
			}
			if err := errors.Join(errs...); err != nil {
				m.errMu.Lock()
				m.werrs = append(m.werrs, fmt.Errorf("monitor: step %d: %w", b.r.Step, err))
				m.errMu.Unlock()
			}
		}
	}(m.queue)
}

// Close writes the steps still queued, then flushes and closes the files
// the Monitor created and rewrites the last deepgo_run.json written
// (WriteRunInfo) with the last step observed if that is later than the
// steps it records, returning any writer error not yet reported. Any
// goroutine may call it, also while the training loop's goroutine is in
// Observe (a process exiting on a signal): the steps Observe has handed
// over are written, later ones are dropped. Later calls wait for the first
// and return its result.
func (m *Monitor) Close() error {
	m.closeOnce.Do(func() { m.closeErr = m.close() })
	return m.closeErr
}

func (m *Monitor) close() error {
	m.qmu.Lock()
	queue := m.queue
	m.queue = nil
	m.qmu.Unlock()
	if queue != nil {
		close(queue)
		<-m.flushed
	}
	m.errMu.Lock()
	errs := m.werrs
	m.werrs = nil
	m.errMu.Unlock()
	for _, w := range m.writers {
		errs = append(errs, w.Close())
	}
	m.writers = nil
	errs = append(errs, m.rewriteRunInfo())
	return errors.Join(errs...)
}
