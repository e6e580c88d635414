// Command bench-zero measures the step time of ZeRO stages 0-3 on the CPU
// backend with 2 and 4 in-process ranks (comm/local) for a ~50M-parameter
// fp32 MLP (internal/testmodel, the engine tests' model) trained with
// AdamW, and the share of each step spent in module compute (forward +
// backward), communication (time blocked issuing or waiting on
// collectives), gradient bucket work (casts, scaling, accumulation) and the
// optimizer. It prints one JSON object.
//
// All ranks share this machine's cores (each rank gets GOMAXPROCS/ranks C
// threads), so the numbers compare the stages' overheads against each
// other, not against a cluster.
//
//	go run ./examples/bench-zero [-hidden 2048] [-layers 12] [-steps 3] [-micro 2]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
)

type result struct {
	Stage          int     `json:"stage"`
	Ranks          int     `json:"ranks"`
	StepSeconds    float64 `json:"step_s"`
	ComputeShare   float64 `json:"compute_share"`
	CommShare      float64 `json:"comm_share"`
	BucketShare    float64 `json:"bucket_share"`
	OptimizerShare float64 `json:"optimizer_share"`
	OtherShare     float64 `json:"other_share"`
	ModelStatesMB  float64 `json:"model_states_MB_per_rank"`
	PeakMB         float64 `json:"peak_MB_per_rank"`
	Loss           float64 `json:"final_loss"`
}

type report struct {
	Params     int64    `json:"params"`
	Hidden     int      `json:"hidden"`
	Layers     int      `json:"layers"`
	MicroBatch int      `json:"micro_batch_per_rank"`
	Steps      int      `json:"timed_steps"`
	GOMAXPROCS int      `json:"gomaxprocs"`
	Note       string   `json:"note"`
	Results    []result `json:"results"`
}

func main() {
	hidden := flag.Int("hidden", 2048, "hidden width")
	layers := flag.Int("layers", 12, "linear layers (hidden x hidden each)")
	steps := flag.Int("steps", 3, "timed steps (after one warm-up step)")
	micro := flag.Int("micro", 2, "micro-batch per rank")
	flag.Parse()
	rep := report{Hidden: *hidden, Layers: *layers, MicroBatch: *micro, Steps: *steps, GOMAXPROCS: runtime.GOMAXPROCS(0),
		Note: "shares are of rank 0's wall time per step; comm is time blocked on collectives (overlapped reduction hides the rest)"}
	rep.Params = int64(*layers) * int64(*hidden) * int64(*hidden+1)
	for _, ranks := range []int{2, 4} {
		for stage := 0; stage <= 3; stage++ {
			r, err := bench(stage, ranks, *hidden, *layers, *steps, *micro)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench-zero:", err)
				os.Exit(1)
			}
			rep.Results = append(rep.Results, r)
			fmt.Fprintf(os.Stderr, "stage %d ranks %d: %.3fs/step\n", stage, ranks, r.StepSeconds)
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(rep)
}

func bench(stage, ranks, hidden, layers, steps, micro int) (result, error) {
	res := result{Stage: stage, Ranks: ranks}
	cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": 1,
		"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
		"zero_optimization": {"stage": %d, "reduce_bucket_size": 5e7, "overlap_comm": true,
			"stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 1e5}}`, micro, stage)
	var mu sync.Mutex
	err := local.Run(context.Background(), ranks, local.Options{}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		sizes := make([]int, layers+1)
		for i := range sizes {
			sizes[i] = hidden
		}
		m := testmodel.NewMLP(1, sizes...)
		e, err := deepgo.Initialize(ctx, cfg, m, deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer e.Close()
		drng := rand.New(rand.NewPCG(uint64(c.Rank()), 3))
		batch := func() []model.MicroBatch {
			x := testmodel.Batch{Rows: micro, Cols: hidden, X: make([]float32, micro*hidden)}
			y := testmodel.Batch{Rows: micro, Cols: hidden, X: make([]float32, micro*hidden)}
			for i := range x.X {
				x.X[i] = float32(drng.NormFloat64())
				y.X[i] = float32(drng.NormFloat64() * 0.1)
			}
			return []model.MicroBatch{{Input: x, Target: y}}
		}
		if _, err := e.TrainBatch(ctx, batch()); err != nil {
			return err
		}
		t0 := e.Timers()
		start := time.Now()
		var loss float64
		for range steps {
			if loss, err = e.TrainBatch(ctx, batch()); err != nil {
				return err
			}
		}
		wall := time.Since(start).Seconds()
		t1 := e.Timers()
		if c.Rank() == 0 {
			sec := func(d time.Duration) float64 { return d.Seconds() / wall }
			mu.Lock()
			res.StepSeconds = wall / float64(steps)
			res.ComputeShare = sec(t1.Forward - t0.Forward + t1.Backward - t0.Backward)
			res.CommShare = sec(t1.Comm - t0.Comm)
			res.BucketShare = sec(t1.Reduce - t0.Reduce)
			res.OptimizerShare = sec(t1.Optimizer - t0.Optimizer)
			res.OtherShare = 1 - res.ComputeShare - res.CommShare - res.BucketShare - res.OptimizerShare
			mem := e.Memory()
			res.ModelStatesMB = float64(mem.ModelStates()) / 1e6
			res.PeakMB = float64(mem.Peak) / 1e6
			res.Loss = loss
			mu.Unlock()
		}
		return nil
	})
	return res, err
}
