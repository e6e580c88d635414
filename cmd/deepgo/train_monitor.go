package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/monitor/gpu"
	"github.com/deepgo-ml/deepgo/tensor"
)

// trainMonitor feeds one rank's monitor.Monitor from its engine each step.
type trainMonitor struct {
	m     *monitor.Monitor
	e     deepgo.Trainer
	info  monitor.RunInfo
	gpu   *gpu.Telemetry // NVML telemetry of the rank's GPU (cuda only)
	every int            // telemetry is sampled every print interval
}

// runMeta is what deepgo_run.json says besides the config.
type runMeta struct {
	world  int
	dev    tensor.Device
	params int
	floor  *float64
	steps  int
}

// newTrainMonitor builds the rank's Monitor from cfg (rank 0 writes; the
// others only join the NaN/Inf check, a collective), prints its notes and
// the config's warnings on rank 0, and writes deepgo_run.json.
func newTrainMonitor(cfg *config.Config, e deepgo.Trainer, rank, every int, targs trainerArgs, meta runMeta, metrics *monitor.MetricsServer, stdout io.Writer) (*trainMonitor, error) {
	capacity := int64(0) // the device's memory is not known without telemetry
	var tel *gpu.Telemetry
	var telNote string
	switch meta.dev.Kind {
	case tensor.KindCPU, tensor.KindSim:
		capacity = monitor.HostMemoryBytes() // sim memory is host memory
	case tensor.KindCUDA:
		t, err := gpu.Open(nil, meta.dev.Index)
		if err != nil {
			return nil, err
		}
		if t.Available() {
			if ss, err := t.Sample(); err == nil && len(ss) == 1 {
				capacity = int64(ss[0].MemoryTotalBytes)
			}
			tel = t
		} else {
			telNote = t.Note()
		}
	}
	opts := []monitor.Option{monitor.WithPrintEvery(every), monitor.WithMemoryCapacity(capacity),
		monitor.WithFiniteCheck(targs.nanCheckEvery, func(ctx context.Context) (bool, error) { return nonfiniteParams(ctx, e) })}
	if rank == 0 {
		opts = append(opts, monitor.WithLog(stdout))
		if metrics != nil {
			opts = append(opts, monitor.WithWriter(metrics))
		}
	}
	m, err := monitor.New(cfg, rank, opts...)
	if err != nil {
		if tel != nil {
			tel.Close()
		}
		return nil, err
	}
	tm := &trainMonitor{m: m, e: e, gpu: tel, every: every}
	if rank != 0 {
		return tm, nil
	}
	if telNote != "" {
		fmt.Fprintln(stdout, "note:", telNote)
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintln(stdout, "warning:", w)
	}
	for _, n := range m.Notes() {
		fmt.Fprintln(stdout, "note:", n)
	}
	b, err := cfg.JSON()
	if err != nil {
		m.Close()
		return nil, err
	}
	tm.info = monitor.RunInfo{Config: json.RawMessage(b), World: meta.world, Device: meta.dev.String(),
		Params: int64(meta.params), EntropyFloor: meta.floor, MemoryCapacityBytes: capacity, Steps: meta.steps}
	if err := m.WriteRunInfo(tm.info); err != nil {
		m.Close()
		return nil, err
	}
	return tm, nil
}

// observe reports the step just trained: its loss, wall time and tokens
// (all ranks), with the engine's counters, timers and memory.
func (tm *trainMonitor) observe(ctx context.Context, loss float64, took time.Duration, tokens int64) error {
	mem := tm.e.Memory()
	t := tm.e.Timers()
	r := monitor.Record{Step: tm.e.GlobalSteps(), Loss: loss, LR: tm.e.LR(), LossScale: tm.e.LossScale(),
		Timers:   monitor.Timers{Forward: t.Forward, Backward: t.Backward, Comm: t.Comm, Reduce: t.Reduce, Optimizer: t.Optimizer, Step: t.Step},
		StepTime: took, Tokens: tokens, HostBytes: mem.HostBytes, DeviceBytes: mem.DeviceBytes, PeakBytes: mem.Peak}
	if e, ok := tm.e.(*deepgo.Engine); ok {
		r.SkippedSteps, r.Overflow, r.GradNorm = e.SkippedSteps(), !e.WasStepApplied(), e.GradNorm()
	}
	if tm.gpu != nil && (r.Step == 1 || r.Step%max(1, tm.every) == 0) {
		// NVML reads cost tens of microseconds: once per print interval
		if ss, err := tm.gpu.Sample(); err == nil && len(ss) == 1 {
			s := ss[0]
			r.GPU = &monitor.GPU{MemoryUsedBytes: s.MemoryUsedBytes, MemoryTotalBytes: s.MemoryTotalBytes,
				UtilizationPct: s.UtilizationPct, PowerW: s.PowerW, TemperatureC: s.TemperatureC}
		}
	}
	return tm.m.Observe(ctx, r)
}

// close rewrites deepgo_run.json with the global step reached and closes
// the files and the telemetry.
func (tm *trainMonitor) close() error {
	if tm.gpu != nil {
		defer tm.gpu.Close()
	}
	if tm.info.Config != nil {
		tm.info.Steps = tm.e.GlobalSteps()
		if err := tm.m.WriteRunInfo(tm.info); err != nil {
			tm.m.Close()
			return err
		}
	}
	return tm.m.Close()
}

// nonfiniteParams gathers the parameters (a collective) and reports
// whether any holds NaN or Inf.
func nonfiniteParams(ctx context.Context, e deepgo.Trainer) (bool, error) {
	ps, err := e.Parameters(ctx)
	if err != nil {
		return false, err
	}
	for _, p := range ps {
		for _, v := range p {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return true, nil
			}
		}
	}
	return false, nil
}

// serveTrainMetrics starts /metrics when --metrics-addr is given (nil
// otherwise) and says where.
func serveTrainMetrics(addr string, stdout io.Writer) (*monitor.MetricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	s, err := monitor.ServeMetrics(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	fmt.Fprintf(stdout, "serving Prometheus metrics on http://%s/metrics\n", s.Addr())
	return s, nil
}
