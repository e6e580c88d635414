package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
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
)

// UlyssesRun is one SP degree's measurement.
type UlyssesRun struct {
	SP              int     `json:"sp"`
	TokensPerRank   int     `json:"tokens_per_rank"`
	ActivationBytes int64   `json:"peak_activation_bytes_per_rank"`
	StepMs          float64 `json:"step_ms"` // median over the timed steps, rank 0
	MemoryRatio     float64 `json:"memory_vs_sp1"`
	TimeRatio       float64 `json:"time_vs_sp1"`
	Oversubscribed  bool    `json:"more_ranks_than_cpus"`
}

// Claim is the user's document's figure for Ulysses.
type Claim struct {
	MemoryChange float64 `json:"memory_change"`
	TimeChange   float64 `json:"time_change"`
	AtT          int     `json:"at_T"`
}

// UlyssesReport is the whole output.
type UlyssesReport struct {
	Machine benchutil.Machine `json:"machine"`
	Mode    string            `json:"mode"`
	Shape   string            `json:"model"`
	T       int               `json:"T"`
	Runs    []UlyssesRun      `json:"runs"`
	Claim   Claim             `json:"claim"`
}

// ulyssesMain is -mode ulysses: its flags are args.
func ulyssesMain(args []string) error {
	fs := flag.NewFlagSet("bench-sp -mode ulysses", flag.ContinueOnError)
	T := fs.Int("T", 0, "sequence length (0: the longest power of two SP 1 holds within -budget-mib)")
	budget := fs.Int("budget-mib", 1024, "activation memory SP 1 may use when -T is 0")
	layers := fs.Int("layers", 2, "GPT layers")
	heads := fs.Int("heads", 8, "attention heads (divisible by every SP degree)")
	width := fs.Int("width", 128, "model width")
	steps := fs.Int("steps", 3, "timed steps (after one warm-up step)")
	sps := fs.String("sp", "1,2,4", "SP degrees, the first the baseline")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return runUlysses("ulysses", *T, *budget, *layers, *heads, *width, *steps, *sps)
}

func runUlysses(mode string, T, budget, layers, heads, width, steps int, sps string) error {
	if mode != "ulysses" {
		return fmt.Errorf("-mode %q: want ulysses", mode)
	}
	var degrees []int
	for _, f := range strings.Split(sps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-sp %q: want positive integers separated by commas", sps)
		}
		degrees = append(degrees, n)
	}
	if steps < 1 {
		return fmt.Errorf("-steps %d: want >= 1", steps)
	}
	cfg := nn.GPTConfig{Layers: layers, Heads: heads, Width: width, Vocab: 256}
	if T == 0 {
		T = longestT(cfg, int64(budget)<<20, slices.Max(degrees))
	}
	cfg.SeqLen = T
	rep := UlyssesReport{Machine: benchutil.ThisMachine(), Mode: mode, T: T,
		Shape: fmt.Sprintf("GPT %d layers, %d heads, width %d, vocab %d, batch 1", layers, heads, width, cfg.Vocab),
		Claim: Claim{MemoryChange: -0.45, TimeChange: 0.18, AtT: 16384}}
	for _, sp := range degrees {
		r, err := measureUlysses(cfg, sp, steps)
		if err != nil {
			return fmt.Errorf("sp %d: %w", sp, err)
		}
		r.Oversubscribed = sp > rep.Machine.CPUs
		rep.Runs = append(rep.Runs, r)
	}
	base := rep.Runs[0]
	for i := range rep.Runs {
		rep.Runs[i].MemoryRatio = float64(rep.Runs[i].ActivationBytes) / float64(base.ActivationBytes)
		rep.Runs[i].TimeRatio = rep.Runs[i].StepMs / base.StepMs
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// longestT is the longest power of two (at least maxSP) whose SP 1
// activations fit budget bytes by an estimate: per layer attention's
// H·T² floats and about 20·T·C more (batch 1); the measured bytes are in
// the report.
func longestT(cfg nn.GPTConfig, budget int64, maxSP int) int {
	best := maxSP
	for t := maxSP; t <= 1<<20; t *= 2 {
		bytes := int64(cfg.Layers) * 4 * (int64(cfg.Heads)*int64(t)*int64(t) + 20*int64(t)*int64(cfg.Width))
		if bytes > budget {
			break
		}
		best = t
	}
	return best
}

// measure trains cfg on SP sp for one warm-up and steps timed steps.
func measureUlysses(cfg nn.GPTConfig, sp, steps int) (UlyssesRun, error) {
	mk, err := data.NewMarkov(cfg.Vocab, 1, 3, 3)
	if err != nil {
		return UlyssesRun{}, err
	}
	corpus := &data.Tokens{IDs: mk.Generate((steps+2)*cfg.SeqLen+1, 4), Vocab: cfg.Vocab}
	dsCfg, err := config.Parse([]byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "sequence_parallel_size": %d,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}`, sp)))
	if err != nil {
		return UlyssesRun{}, err
	}
	r := UlyssesRun{SP: sp, TokensPerRank: cfg.SeqLen / sp}
	var mu sync.Mutex
	var times []float64
	err = local.Run(context.Background(), sp, local.Options{Timeout: 30 * time.Minute, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		sdc, sc, _, err := deepgo.SequenceParallelGroups(ctx, c, sp)
		if err != nil {
			return err
		}
		g := cfg
		g.SP = nn.SP{Comm: sc}
		gpt, err := nn.NewReadyGPT(g, nil, 1)
		if err != nil {
			return err
		}
		defer gpt.Free()
		e, err := deepgo.Initialize(ctx, dsCfg, gpt, deepgo.WithComm(sdc), deepgo.WithSequenceParallel(sc))
		if err != nil {
			return err
		}
		defer e.Close()
		var peak int64
		for step := 0; step <= steps; step++ {
			b, err := corpus.MakeBatch([]int{step}, cfg.SeqLen).SequenceShard(sc.Rank(), sp)
			if err != nil {
				return err
			}
			t0 := time.Now()
			if _, err := e.TrainBatch(ctx, []model.MicroBatch{b.MicroBatch()}); err != nil {
				return err
			}
			d := time.Since(t0)
			st := gpt.ActivationStats()
			peak = max(peak, st.Bytes+st.ScratchBytes)
			if step > 0 && c.Rank() == 0 {
				mu.Lock()
				times = append(times, float64(d.Microseconds())/1e3)
				mu.Unlock()
			}
		}
		if c.Rank() == 0 {
			r.ActivationBytes = peak
		}
		return nil
	})
	r.StepMs = benchutil.Median(times)
	return r, err
}
