package main

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/benchdev"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

// -mode checkpointing: the GPT through the data-parallel engine
// (deepgo.Initialize), its blocks checkpointed by the engine, under the
// activation_checkpointing variants. Activation bytes per rank are what
// one micro-step holds on the compute device from the end of its forward
// into its backward: the engine's micro-step arena (the modules'
// activations), the boundaries it kept there, and the GPT's own buffers
// (tokens, embedding output, head); host bytes are cpu_checkpointing's.
// Step time is Forward + Backward (the optimizer step excluded, as in the
// other modes), the median over -steps after one warm-up, on rank 0.

// ckptCase is one variant.
type ckptCase struct {
	Name    string `json:"name"`
	Device  string `json:"device"`
	TP      int    `json:"tensor_parallel"`
	Section string `json:"activation_checkpointing"`
	ckpt    bool
}

// ckptResult is one variant's measurement and its ratios to the same
// device and TP size without checkpointing.
type ckptResult struct {
	ckptCase
	ActivationBytes int64   `json:"activation_bytes_per_rank"`
	HostBytes       int64   `json:"saved_host_bytes_per_rank"`
	SavedBytes      int64   `json:"saved_boundary_bytes_per_rank"`
	ScratchPeak     int64   `json:"scratch_peak_bytes"`
	StepSeconds     float64 `json:"step_s"`
	Loss            float64 `json:"loss"`
	BytesRatio      float64 `json:"activation_bytes_ratio"`
	TimeRatio       float64 `json:"step_time_ratio"`
}

// ckptCases are the variants: on the CPU at TP 2 (the only place TP runs)
// none, checkpointing, + partition_activations; on the simulated device
// none, checkpointing, + cpu_checkpointing (DeepSpeed applies it to
// partitioned activations, so partition_activations is on, over a TP
// group of one).
func ckptCases() []ckptCase {
	return []ckptCase{
		{Name: "none", Device: "cpu", TP: 2},
		{Name: "checkpointing", Device: "cpu", TP: 2, ckpt: true},
		{Name: "checkpointing+partition_activations", Device: "cpu", TP: 2, ckpt: true, Section: `"partition_activations": true`},
		{Name: "none", Device: "sim", TP: 1},
		{Name: "checkpointing", Device: "sim", TP: 1, ckpt: true},
		{Name: "checkpointing+cpu_checkpointing", Device: "sim", TP: 1, ckpt: true, Section: `"partition_activations": true, "cpu_checkpointing": true`},
	}
}

// runCheckpointing fills out["checkpointing"] with every case.
func runCheckpointing(p params, cfg nn.GPTConfig, in, tg []int32, out map[string]any) error {
	var res []ckptResult
	base := map[string]ckptResult{}
	for _, c := range ckptCases() {
		r, err := benchCkpt(c, p, cfg, in, tg)
		if err != nil {
			return fmt.Errorf("checkpointing %s on %s: %w", c.Name, c.Device, err)
		}
		key := fmt.Sprint(c.Device, c.TP)
		if !c.ckpt {
			base[key] = r
		}
		b := base[key]
		r.BytesRatio = float64(r.ActivationBytes) / float64(b.ActivationBytes)
		r.TimeRatio = r.StepSeconds / b.StepSeconds
		res = append(res, r)
	}
	out["checkpointing"] = res
	out["checkpointing_method"] = "the GPT through deepgo.Initialize, blocks as engine checkpoint segments; activation bytes per rank = engine micro-step arena + kept boundaries on the device + the GPT's own buffers at the end of forward; step = Forward + Backward (+ Synchronize on sim), median of -steps after one warm-up, rank 0; ratios against none on the same device and TP size"
	return nil
}

// benchCkpt measures one case.
func benchCkpt(c ckptCase, p params, cfg nn.GPTConfig, in, tg []int32) (ckptResult, error) {
	cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "tensor_model_parallel_size": %d,
		"activation_checkpointing": {%s}, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}`, p.batch, c.TP, c.Section)
	res := ckptResult{ckptCase: c}
	mb := model.TokenBatch{Inputs: in, Targets: tg, B: p.batch, T: p.seq}.MicroBatch()
	run := func(ctx context.Context, rank int, tp nn.TP, be backend.Backend, opts []deepgo.Option) error {
		cf, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		gc := cfg
		gc.TP = tp
		gc.Checkpointing.Enabled = c.ckpt
		g, err := nn.NewReadyGPT(gc, nil, 1)
		if err != nil {
			return err
		}
		defer g.Free()
		t, err := deepgo.Initialize(ctx, cf, g, opts...)
		if err != nil {
			return err
		}
		defer t.Close()
		e := t.(*deepgo.Engine)
		var ds []time.Duration
		var act int64
		var last float64
		var st deepgo.CheckpointStats
		for s := 0; s <= p.steps; s++ {
			t0 := time.Now()
			loss, err := e.Forward(ctx, mb)
			if err != nil {
				return err
			}
			m := e.Memory()
			act = m.Arena + g.ActivationStats().Bytes
			st = e.CheckpointStats()
			err = e.Backward(ctx)
			if err == nil && be != nil {
				err = be.Synchronize(ctx) // the sim's queued backward
			}
			if err != nil {
				return err
			}
			if s > 0 {
				ds = append(ds, time.Since(t0))
			}
			last = loss
			// untimed: the engine takes each micro-step as Forward, Backward,
			// Step (every variant steps alike, so their losses stay comparable)
			if err := e.Step(ctx); err != nil {
				return err
			}
		}
		if rank == 0 {
			res.Loss = last
			slices.Sort(ds)
			res.StepSeconds = ds[len(ds)/2].Seconds()
			res.ActivationBytes = act + st.SavedBytes
			res.SavedBytes, res.HostBytes, res.ScratchPeak = st.SavedBytes, st.SavedHostBytes, st.ScratchPeak
		}
		return nil
	}
	ctx := context.Background()
	if c.Device == "sim" {
		dev, _ := tensor.ParseDevice("sim")
		be, err := benchdev.Open(dev, cmp.Or(p.threads, runtime.GOMAXPROCS(0)))
		if err != nil {
			return res, err
		}
		defer be.Close()
		return res, run(ctx, 0, nn.TP{}, be, []deepgo.Option{deepgo.WithBackend(be)})
	}
	err := local.Run(ctx, c.TP, local.Options{Timeout: 10 * time.Minute, Threads: max(1, runtime.GOMAXPROCS(0)/c.TP)}, func(ctx context.Context, w comm.Comm) error {
		dc, tc, err := deepgo.TensorParallelGroups(ctx, w, c.TP)
		if err != nil {
			return err
		}
		return run(ctx, w.Rank(), nn.TP{Comm: tc}, nil, []deepgo.Option{deepgo.WithComm(dc), deepgo.WithTensorParallel(tc)})
	})
	return res, err
}
