package main

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

// opTime is one kernel's share of a step in -mode ops.
type opTime struct {
	Op           string  `json:"op"`
	MsPerStep    float64 `json:"ms_per_step"`
	CallsPerStep float64 `json:"calls_per_step"`
	Share        float64 `json:"share"`
}

// opsRun is -mode ops on one thread count.
type opsRun struct {
	Threads      int      `json:"threads"`
	StepSeconds  float64  `json:"step_s"`
	TokensPerSec float64  `json:"tokens_per_s"`
	Ops          []opTime `json:"ops"`
	// Between is the share of the step outside any kernel: Go code,
	// argument checks and cgo calls.
	Between float64 `json:"between_kernels_share"`
	// PoolRegions are parallel regions per step; PoolIdleShare is the share
	// of the pool's thread time in them spent waiting for a slower thread
	// (csrc.PoolBalance): what a dynamic split could win back.
	PoolRegions   float64 `json:"pool_regions_per_step"`
	PoolIdleShare float64 `json:"pool_idle_share"`
}

// runOps times every kernel of the GPT's step (forward and backward,
// checkpointing off) on 1 and 2 threads: the backend is a host view whose
// Executor (backend.CPU.On) clocks each C call by kernel name. The clock
// reads add well under 1% to a step of ~200 kernels.
func runOps(p params, cfg nn.GPTConfig, in, tg []int32, out map[string]any) error {
	var runs []opsRun
	for _, threads := range []int{1, 2} {
		r, err := timeOps(cfg, threads, p.steps, in, tg, p.batch, p.seq)
		if err != nil {
			return fmt.Errorf("-mode ops, %d threads: %w", threads, err)
		}
		runs = append(runs, r)
	}
	out["ops_method"] = "per kernel: wall time of its C calls through a timing Executor on a host view of the CPU backend, summed over -steps after one warm-up, per step; share = of the step's wall time"
	out["ops"] = runs
	return nil
}

func timeOps(cfg nn.GPTConfig, threads, steps int, in, tg []int32, B, T int) (opsRun, error) {
	cpu, err := backend.NewCPU(threads)
	if err != nil {
		return opsRun{}, err
	}
	defer cpu.Close()
	spent := map[string]time.Duration{}
	calls := map[string]int{}
	be := cpu.On(tensor.CPU, func(op string, _ bool, kernel func() error) error {
		t0 := time.Now()
		err := kernel()
		spent[op] += time.Since(t0)
		calls[op]++
		return err
	})
	g, free, err := newModel(cfg)
	if err != nil {
		return opsRun{}, err
	}
	defer free()
	var total time.Duration
	for s := 0; s <= steps; s++ {
		if s == 1 { // the first step allocates and warms caches
			clear(spent)
			clear(calls)
			if _, err := cpu.Ctx().PoolBalance(true); err != nil {
				return opsRun{}, err
			}
		}
		t0 := time.Now()
		if _, err := g.Forward(be, in, tg, B, T); err != nil {
			return opsRun{}, err
		}
		if err := g.Backward(be); err != nil {
			return opsRun{}, err
		}
		if s > 0 {
			total += time.Since(t0)
		}
	}
	bal, err := cpu.Ctx().PoolBalance(false)
	if err != nil {
		return opsRun{}, err
	}
	n := float64(steps)
	r := opsRun{Threads: threads, StepSeconds: total.Seconds() / n, TokensPerSec: float64(B*T) * n / total.Seconds(),
		PoolRegions: float64(bal.Regions) / n, PoolIdleShare: bal.IdleShare(), Between: 1}
	for op, d := range spent {
		share := d.Seconds() / total.Seconds()
		r.Ops = append(r.Ops, opTime{Op: op, MsPerStep: d.Seconds() * 1e3 / n, CallsPerStep: float64(calls[op]) / n, Share: share})
		r.Between -= share
	}
	slices.SortFunc(r.Ops, func(a, b opTime) int { return cmp.Compare(b.MsPerStep, a.MsPerStep) })
	return r, nil
}
