// Command bench-train measures training throughput of a ~10M-parameter GPT
// on the CPU (forward + backward, the step excluded: bench-adam measures
// optimizers) with 1 and 2 threads, with and without activation
// checkpointing, and reports MFU against a peak measured in the same run:
// an OpenBLAS sgemm of a large square matrix on the same pool.
//
//	go run ./examples/bench-train [-steps 3] [-batch 4] [-seq 128]
//
// FLOPs per token (printed with the result): 6N for the parameter matmuls
// (forward 2N, backward 4N; N without the position table) plus attention,
// 6·L·T_eff·C·2 where T_eff is the mean number of keys a query sees
// ((T+1)/2 causal); with checkpointing the recomputed forward adds 2N +
// 2·L·T_eff·C·2 of hardware FLOPs that MFU does not credit.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

type run struct {
	Threads         int     `json:"threads"`
	Checkpointing   bool    `json:"activation_checkpointing"`
	TokensPerSec    float64 `json:"tokens_per_s"`
	StepSeconds     float64 `json:"step_s"`
	GFLOPs          float64 `json:"model_gflops_per_s"`
	MFU             float64 `json:"mfu"`
	ActivationBytes int64   `json:"activation_bytes"`
	ScratchBytes    int64   `json:"scratch_bytes"`
	Loss            float32 `json:"loss"`
}

func peak(threads int) (float64, error) {
	be, err := backend.NewCPU(threads)
	if err != nil {
		return 0, err
	}
	defer be.Close()
	const n = 1536
	var ts [3]*tensor.Tensor
	for i := range ts {
		if ts[i], err = tensor.Empty(tensor.Float32, n, n); err != nil {
			return 0, err
		}
		defer ts[i].Free()
		f, _ := ts[i].Float32s()
		for j := range f {
			f[j] = float32(j%7) * 0.1
		}
	}
	best := time.Duration(1 << 62)
	for rep := 0; rep < 4; rep++ {
		t0 := time.Now()
		if err := be.LinearForward(ts[0], ts[1], ts[2], nil); err != nil {
			return 0, err
		}
		best = min(best, time.Since(t0))
	}
	return 2 * n * n * n / best.Seconds(), nil
}

func main() {
	steps := flag.Int("steps", 3, "timed steps per configuration (after one warm-up)")
	B := flag.Int("batch", 4, "sequences per step")
	T := flag.Int("seq", 128, "sequence length")
	flag.Parse()
	cfg := nn.GPTConfig{Layers: 6, Heads: 6, Width: 384, Vocab: 4096, SeqLen: *T}
	N := cfg.NumParams() - cfg.SeqLen*cfg.Width
	teff := float64(*T+1) / 2
	flopsPerToken := 6*float64(N) + 6*float64(cfg.Layers)*teff*float64(cfg.Width)*2
	out := map[string]any{
		"model":            map[string]int{"layers": cfg.Layers, "heads": cfg.Heads, "width": cfg.Width, "vocab": cfg.Vocab, "seq": *T, "batch": *B, "params": cfg.NumParams()},
		"flops_per_token":  flopsPerToken,
		"mfu_formula":      "MFU = (6*N + 6*L*T_eff*C*2) * tokens_per_s / peak; N = params without wpe, T_eff = (T+1)/2; peak = sgemm 1536^3 on the same thread count",
		"openblas_threads": "1 per call; the backend's pool splits rows",
		"gomaxprocs":       runtime.GOMAXPROCS(0),
	}
	r := rand.New(rand.NewPCG(1, 2))
	in, tg := make([]int32, *B**T), make([]int32, *B**T)
	for i := range in {
		in[i], tg[i] = int32(r.IntN(cfg.Vocab)), int32(r.IntN(cfg.Vocab))
	}
	var runs []run
	peaks := map[string]float64{}
	for _, threads := range []int{1, 2} {
		pk, err := peak(threads)
		if err != nil {
			fail(err)
		}
		peaks[fmt.Sprint(threads)] = pk / 1e9
		for _, ck := range []bool{false, true} {
			c := cfg
			c.Checkpointing.Enabled = ck
			res, err := bench(c, threads, *steps, in, tg, *B, *T)
			if err != nil {
				fail(err)
			}
			res.GFLOPs = flopsPerToken * res.TokensPerSec / 1e9
			res.MFU = flopsPerToken * res.TokensPerSec / pk
			runs = append(runs, res)
		}
	}
	out["peak_sgemm_gflops"] = peaks
	out["runs"] = runs
	json.NewEncoder(os.Stdout).Encode(out)
}

func bench(cfg nn.GPTConfig, threads, steps int, in, tg []int32, B, T int) (run, error) {
	be, err := backend.NewCPU(threads)
	if err != nil {
		return run{}, err
	}
	defer be.Close()
	g, err := nn.NewGPT(cfg)
	if err != nil {
		return run{}, err
	}
	pb, err := nn.NewParamBuffers(g)
	if err != nil {
		return run{}, err
	}
	defer pb.Free()
	defer g.Free()
	if err := g.Init(1); err != nil {
		return run{}, err
	}
	var loss float32
	var total time.Duration
	for s := 0; s <= steps; s++ {
		t0 := time.Now()
		if loss, err = g.Forward(be, in, tg, B, T); err != nil {
			return run{}, err
		}
		if err := g.Backward(be); err != nil {
			return run{}, err
		}
		if s > 0 { // the first step allocates and warms caches
			total += time.Since(t0)
		}
	}
	st := g.ActivationStats()
	sec := total.Seconds() / float64(steps)
	return run{Threads: threads, Checkpointing: cfg.Checkpointing.Enabled, TokensPerSec: float64(B*T) / sec, StepSeconds: sec,
		ActivationBytes: st.Bytes, ScratchBytes: st.ScratchBytes, Loss: loss}, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-train:", err)
	os.Exit(1)
}
