package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/tensor"
)

// trainMonitor is what deepgo train adds to the engine's monitor (which
// TrainBatch feeds every step): the train batch size its Train/Samples
// x values count, deepgo_run.json with what only the trainer knows (the
// model's size, the data's entropy floor), and the close on an interrupt.
type trainMonitor struct {
	m           *monitor.Monitor
	e           deepgo.Trainer
	mu          sync.Mutex // guards info, interrupted and the writes: interrupt runs on the signal's goroutine
	info        monitor.RunInfo
	interrupted bool // interrupt wrote the steps the interrupted line names: close leaves them
}

// runMeta is what deepgo_run.json says besides the config.
type runMeta struct {
	world  int
	dev    tensor.Device
	params int
	floor  *float64
	steps  int
}

// newTrainMonitor writes deepgo_run.json into the engine monitor's run
// directories on rank 0. (The config's warnings are among the engine's
// notes, which train prints.)
func newTrainMonitor(cfg *config.Config, e deepgo.Trainer, rank int, meta runMeta, stdout io.Writer) (*trainMonitor, error) {
	tm := &trainMonitor{e: e}
	if rank != 0 {
		return tm, nil
	}
	if e.Monitor() == nil {
		return tm, nil
	}
	tm.m = e.Monitor()
	tm.m.SetTrainBatchSize(e.BatchSizes().TrainBatchSize) // global_samples, as the engine resolved the batch
	b, err := cfg.JSON()
	if err != nil {
		return nil, err
	}
	tm.info = monitor.RunInfo{Config: json.RawMessage(b), World: meta.world, Device: meta.dev.String(),
		Params: int64(meta.params), EntropyFloor: meta.floor, MemoryCapacityBytes: tm.m.MemoryCapacity(), Steps: int64(meta.steps)}
	if err := tm.m.WriteRunInfo(tm.info); err != nil {
		return nil, err
	}
	return tm, nil
}

// close rewrites deepgo_run.json with the global step reached (before
// the engine closes its monitor), unless an interrupt has written it: the
// ranks train on while the process exits (a rank whose NVMe swap files
// the interrupt removed even returns), and the step they reach is later
// than the one the interrupted line names.
func (tm *trainMonitor) close() error {
	if tm.m == nil {
		return nil
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.interrupted {
		return nil
	}
	tm.info.Steps = int64(tm.e.GlobalSteps())
	return tm.m.WriteRunInfo(tm.info)
}

// interrupt is close for a process about to exit on a signal while the
// ranks still train: it closes the monitor, which writes every step it has
// been handed to its files and drops later ones (no torn last row), and
// rewrites deepgo_run.json with step, the last step rank 0 finished.
func (tm *trainMonitor) interrupt(step int) error {
	if tm.m == nil {
		return nil
	}
	err := tm.m.Close()
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.interrupted = true
	tm.info.Steps = int64(step)
	return errors.Join(err, tm.m.WriteRunInfo(tm.info))
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
	fmt.Fprintf(stdout, "deepgo: serving Prometheus metrics on http://%s/metrics\n", s.Addr())
	if host, _, err := net.SplitHostPort(s.Addr()); err == nil {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			fmt.Fprintf(stdout, "deepgo: WARNING: the metrics on %s are reachable from other machines, without authentication\n", s.Addr())
		}
	}
	return s, nil
}
