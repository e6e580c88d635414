// Command bench-pipe measures the pipeline engine and prints one JSON
// object:
//
//   - bubble: the idle share of each stage (the part of a batch's schedule
//     in which it runs no forward or backward pass) under 1F1B, GPipe and
//     the interleaved schedule, next to theory: (p−1)/(m+p−1) for 1F1B and
//     GPipe, (p−1)/(v·m+p−1) interleaved. The model's layers take fixed
//     times (see timedModel), equal forward and backward, the stage's
//     layers split into v chunks under the interleaved schedule.
//   - activation memory per stage of the GPT under 1F1B and GPipe: 1F1B
//     holds at most p−s micro-batches in flight on stage s (DeepSpeed keeps
//     at least 2 buffers), GPipe all m. A stage keeps one part (activation
//     set) per buffer it has used.
//
// A stage's idle share also holds what the engine adds between passes
// (transfers and their goroutine hand-offs, the boundary's agreements and
// step), measured at about 60 µs per pass on a loaded 2-vCPU machine: with
// the interleaved schedule's 2 ms passes (-layer-ms 4) that is 2.5-2.8
// points over theory, with 4 ms passes (the default -layer-ms 8) 1.3-1.5.
// The machine's other load shows too: run it on a quiet machine.
//
//	go run ./examples/bench-pipe [-stages 4] [-micro 8] [-virtual 2] [-layer-ms 8] [-batches 6]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Bubble is one schedule's measured idle shares.
type Bubble struct {
	Schedule string    `json:"schedule"`
	Stages   int       `json:"stages"`
	Micro    int       `json:"micro_batches"`
	Virtual  int       `json:"virtual_stages"`
	Theory   float64   `json:"theory"`
	Measured []float64 `json:"measured_per_stage"` // median over the timed batches
	// MaxDiffPoints is the largest |measured − theory| over the stages, in
	// percentage points.
	MaxDiffPoints float64 `json:"max_diff_points"`
	Within2Points bool    `json:"within_2_points"`
	BatchMs       float64 `json:"batch_ms"` // median wall time of a batch on stage 0
}

// Memory is one stage's activation memory under one schedule.
type Memory struct {
	Schedule  string `json:"schedule"`
	Stage     int    `json:"stage"`
	Bytes     int64  `json:"activation_bytes"`
	PartBytes int64  `json:"bytes_per_micro_batch"`
	Held      int    `json:"micro_batches_held"` // the buffers the stage filled (PipeEngine.PartsMade)
	// Theory is the buffers the schedule needs: 1F1B max(2, min(p−s, m))
	// (at most p−s micro-batches in flight, DeepSpeed's floor of 2
	// buffers), GPipe m.
	Theory int `json:"theory_buffers"`
}

// Report is the whole output.
type Report struct {
	Machine benchutil.Machine `json:"machine"`
	LayerMs float64           `json:"layer_ms"` // forward = backward time of one stage's share of a micro-batch
	Bubbles []Bubble          `json:"bubble"`
	Memory  []Memory          `json:"activation_memory"`
}

func main() {
	stages := flag.Int("stages", 4, "pipeline stages p")
	micro := flag.Int("micro", 8, "micro-batches per batch m")
	virtual := flag.Int("virtual", 2, "virtual stages per stage v (interleaved)")
	layerMs := flag.Float64("layer-ms", 8, "forward (= backward) time of one stage's layers per micro-batch, ms")
	batches := flag.Int("batches", 6, "timed batches per schedule (after one warm-up)")
	flag.Parse()
	if err := run(*stages, *micro, *virtual, *layerMs, *batches); err != nil {
		fmt.Fprintln(os.Stderr, "bench-pipe:", err)
		os.Exit(1)
	}
}

func run(p, m, v int, layerMs float64, batches int) error {
	rep := Report{Machine: benchutil.ThisMachine(), LayerMs: layerMs}
	for _, s := range []struct {
		name    string
		virtual int
	}{{"1F1B", 1}, {"GPipe", 1}, {"Interleaved", v}} {
		b, err := bubble(s.name, p, m, s.virtual, v, layerMs, batches)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		rep.Bubbles = append(rep.Bubbles, b)
	}
	for _, s := range []string{"1F1B", "GPipe"} {
		mem, err := activations(s, p, m)
		if err != nil {
			return fmt.Errorf("%s activations: %w", s, err)
		}
		rep.Memory = append(rep.Memory, mem...)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func pipeConfig(sched string, p, m, v int) (*config.Config, error) {
	return config.Parse(fmt.Appendf(nil, `{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": %d,
		"pipeline_model_parallel_size": %d, "pipeline_schedule": {"type": %q, "virtual_stages": %d},
		"pipeline": {"partition": "uniform"}, "optimizer": {"type": "SGD", "params": {"lr": 0.001}}}`, m, p, sched, v))
}

// runStages runs fn on each of p in-process ranks with an engine for sched.
func runStages(sched string, p, m, v int, net func() model.Model, fn func(ctx context.Context, stage int, pe *deepgo.PipeEngine) error) error {
	return local.Run(context.Background(), p, local.Options{Timeout: time.Minute, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := pipeConfig(sched, p, m, v)
		if err != nil {
			return err
		}
		tr, err := deepgo.Initialize(ctx, cfg, net(), deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer tr.Close()
		return fn(ctx, c.Rank(), tr.(*deepgo.PipeEngine))
	})
}

// bubble measures sched's idle share per stage. The model has p×vmax
// layers of layerMs/vmax each, so a stage's share of a micro-batch takes
// layerMs whatever the schedule's v.
func bubble(sched string, p, m, v, vmax int, layerMs float64, batches int) (Bubble, error) {
	per := time.Duration(layerMs / float64(vmax) * float64(time.Millisecond))
	const width = 64
	res := Bubble{Schedule: sched, Stages: p, Micro: m, Virtual: v,
		Theory: float64(p-1) / float64(v*m+p-1), Measured: make([]float64, p)}
	var mu sync.Mutex
	err := runStages(sched, p, m, v, func() model.Model { return newTimedModel(p*vmax, width, per, per) }, func(ctx context.Context, stage int, pe *deepgo.PipeEngine) error {
		var walls []time.Duration
		for i := range batches + 1 {
			mbs := make([]model.MicroBatch, m)
			for j := range mbs {
				x, err := tensor.FromFloat32(make([]float32, width), width)
				if err != nil {
					return err
				}
				defer x.Free()
				mbs[j] = model.MicroBatch{Input: x}
			}
			t0 := time.Now()
			if _, err := pe.TrainBatch(ctx, mbs); err != nil {
				return err
			}
			if i > 0 {
				walls = append(walls, time.Since(t0))
			}
		}
		idle := pe.IdleShares()[1:]
		mu.Lock()
		defer mu.Unlock()
		res.Measured[stage] = median(idle)
		if stage == 0 {
			slices.Sort(walls)
			res.BatchMs = float64(walls[len(walls)/2]) / 1e6
		}
		return nil
	})
	for _, x := range res.Measured {
		res.MaxDiffPoints = math.Max(res.MaxDiffPoints, 100*math.Abs(x-res.Theory))
	}
	res.Within2Points = res.MaxDiffPoints <= 2
	return res, err
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// activations trains one batch of a GPT with sched and reports each
// stage's activation memory.
func activations(sched string, p, m int) ([]Memory, error) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	if err != nil {
		return nil, err
	}
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	gcfg := nn.GPTConfig{Layers: 2 * p, Heads: 2, Width: 32, Vocab: 32, SeqLen: 16}
	out := make([]Memory, p)
	var mu sync.Mutex
	var models []*nn.GPT
	defer func() {
		for _, g := range models {
			g.Free()
		}
	}()
	// every part of a stage holds the same activations, so the stage's
	// bytes over its parts is one micro-batch's
	err = runStages(sched, p, m, 1, func() model.Model {
		g, err := nn.NewReadyGPT(gcfg, nil, 1)
		if err != nil {
			panic(err)
		}
		mu.Lock()
		models = append(models, g)
		mu.Unlock()
		return g
	}, func(ctx context.Context, stage int, pe *deepgo.PipeEngine) error {
		mbs := make([]model.MicroBatch, m)
		for j := range mbs {
			mbs[j] = corpus.MakeBatch([]int{j}, 16).MicroBatch()
		}
		if _, err := pe.TrainBatch(ctx, mbs); err != nil {
			return err
		}
		held := pe.PartsMade()
		theory := m
		if sched == "1F1B" {
			theory = max(2, min(p-stage, m))
		}
		mu.Lock()
		out[stage] = Memory{Schedule: sched, Stage: stage, Bytes: pe.ActivationBytes(), PartBytes: pe.ActivationBytes() / int64(held),
			Held: held, Theory: theory}
		mu.Unlock()
		return nil
	})
	return out, err
}
