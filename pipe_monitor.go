package deepgo

// The pipeline engine's monitor: the one the data-parallel engine feeds
// (monitoring.go), built from the same config sections and fed once per
// TrainBatch; and its comms_logger, over every group the engine uses
// (flops_profiler: pipe_flops.go). Its x values are DeepSpeed's
// PipelineEngine's: train_loss is written once the batch's step has run,
// at the global_samples of lr and loss_scale
// (monitor.WithTrainLossAfterStep), where the data-parallel engine writes
// it a batch earlier. With wall_clock_breakdown the engine prints
// DeepSpeed's PipelineEngine timer lines itself (pipe_timers.go; the
// monitor prints none) and the monitor writes the elapsed_time_ms tags of
// the batch's global timers (fwd, bwd, bwd_inner, bwd_allreduce, step),
// which DeepSpeed's PipelineEngine only prints.

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
)

// startMonitor builds the stage's monitor: every rank checks its stage's
// parameters for NaN/Inf at the check interval (a collective over the
// world), the world's rank 0 writes. The memory target divides by the
// host's RAM on the CPU and the simulated device, by the GPU's memory on
// CUDA, whose telemetry the records carry, as the data-parallel engine's.
func (e *PipeEngine) startMonitor(o options) error {
	t, capacity, err := deviceTelemetry(e.be.Device(), &e.notes)
	if err != nil {
		return err
	}
	e.gpu = t
	opts := append([]monitor.Option{monitor.WithLog(e.log), monitor.WithMemoryCapacity(capacity),
		monitor.WithFiniteCheck(0, func(ctx context.Context) (bool, error) {
			return nonfiniteMasters(ctx, e.be, e.z, e.world)
		}), monitor.WithTrainLossAfterStep(), monitor.WithoutBreakdownLines()}, o.monitor...)
	m, err := monitor.New(e.cfg, e.world.Rank(), opts...)
	if err != nil {
		return err
	}
	m.SetTrainBatchSize(e.batch.TrainBatchSize)
	e.mon = m
	e.notes = append(e.notes, m.Notes()...)
	if (e.cfg.WallClockBreakdown || e.cfg.FlopsProfiler.Enabled) && e.cfg.StepsPerPrint == nil {
		e.notes = append(e.notes, pipeTimerNote(m.PrintEvery()))
	}
	return nil
}

// pipeLog is where the engine's reports go (the monitor's lines,
// comms_logger, flops_profiler): WithLog's writer, else standard error on
// the world's rank 0 (the program's standard output stays its own), else
// nowhere.
func pipeLog(o options) io.Writer {
	switch {
	case o.log != nil:
		return o.log
	case o.comm.Rank() == 0:
		return os.Stderr
	}
	return io.Discard
}

// CommsSummary writes comms_logger's summary table (DeepSpeed's
// log_summary) to w; without comms_logger.enabled it says so.
func (e *PipeEngine) CommsSummary(w io.Writer) error {
	if e.comms == nil {
		return fmt.Errorf("deepgo: CommsSummary: comms_logger.enabled is false")
	}
	return e.comms.Summary(w)
}

// Monitor is the engine's monitor: its run directories, its warnings, and
// WriteRunInfo for a trainer that knows more of the run.
func (e *PipeEngine) Monitor() *monitor.Monitor { return e.mon }

// observe reports the batch TrainBatch just ran (its mean loss, skipped or
// not) to the monitor. Every rank calls it: the NaN/Inf check is a
// collective.
func (e *PipeEngine) observe(ctx context.Context, loss float64, took time.Duration, overflow bool, data []model.MicroBatch) error {
	if e.mon == nil {
		return nil
	}
	mem, t := e.Memory(), e.Timers()
	r := monitor.Record{Step: e.globalSteps, Loss: loss, LR: e.LR(), LossScale: e.LossScale(),
		SkippedSteps: e.skippedSteps, Overflow: overflow, GradNorm: e.gradNorm,
		Timers: t.monitor(), Breakdown: e.pt.breakdown(),
		StepTime: took, Tokens: batchTokens(data) * int64(e.data.Size()),
		HostBytes: mem.HostBytes, DeviceBytes: mem.DeviceBytes, PeakBytes: mem.Peak}
	r.GPU = gpuRecord(e.gpu, e.mon, r.Step)
	if err := e.mon.Observe(ctx, r); err != nil {
		return fmt.Errorf("deepgo: pipeline stage %d: monitor: %w", e.stage, err)
	}
	return nil
}

// closeMonitor writes out and closes the monitor's files and ends the
// telemetry.
func (e *PipeEngine) closeMonitor() error { return closeMonitors(&e.mon, &e.gpu) }
