// Command bench-train measures training throughput of a ~10M-parameter GPT
// (forward + backward, the step excluded: bench-adam measures optimizers),
// with and without activation checkpointing, and reports MFU against a peak
// measured in the same run on the same device.
//
//	go run ./examples/bench-train [-device cpu|sim|cuda] [-steps 3] [-batch 4] [-seq 128]
//	    [-layers 6 -heads 6 -width 384 -vocab 4096] [-threads N] [-peer [-rounds 3]]
//	go run ./examples/bench-train -mode checkpointing [-steps 3] [model flags]
//	go run ./examples/bench-train -mode ops [-steps 3] [model flags] [-cpuprofile FILE]
//
// -mode checkpointing (ckpt.go) instead runs the GPT through the engine
// and reports activation bytes per rank and step time of the
// activation_checkpointing variants, as ratios to no checkpointing.
//
// -mode ops (ops.go) is the profile: each kernel's wall time per step on 1
// and 2 threads, the time between kernels (Go code), and how long the
// pool's threads waited for each other. -cpuprofile writes a pprof CPU
// profile of any mode; the C kernels show there only as runtime.cgocall
// (the calling thread) and the C libraries (the pool's threads), which is
// why -mode ops times them by name.
//
// On the CPU (the default) it runs 1 and 2 threads; the peak is an sgemm of
// a large square matrix on the same pool and BLAS (OpenBLAS, or MKL under
// DEEPGO_BLAS), and a configuration's
// time is the mean of -steps after one warm-up. On a device (device.go)
// parameters, gradients and activations live in device memory; see
// benchDevice for what is timed and how.
//
// With -peer (CPU only) the same GPT also runs in PyTorch eager, fp32,
// alternately with ours on 1 and 2 threads (peer.go, peer.py), from the venv
// that scripts/install-peers.sh makes; without it the "peer" field says so.
//
// FLOPs per token (printed with the result): 6N for the parameter matmuls
// (forward 2N, backward 4N; N without the position table) plus attention,
// 6·L·T_eff·C·2 where T_eff is the mean number of keys a query sees
// ((T+1)/2 causal); with checkpointing the recomputed forward adds 2N +
// 2·L·T_eff·C·2 of hardware FLOPs that MFU does not credit.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

type run struct {
	Device          string  `json:"device,omitempty"`
	Threads         int     `json:"threads,omitempty"`
	Checkpointing   bool    `json:"activation_checkpointing"`
	TokensPerSec    float64 `json:"tokens_per_s"`
	StepSeconds     float64 `json:"step_s"`
	GFLOPs          float64 `json:"model_gflops_per_s"`
	MFU             float64 `json:"mfu"`
	ActivationBytes int64   `json:"activation_bytes"`
	ScratchBytes    int64   `json:"scratch_bytes"`
	Loss            float32 `json:"loss"`
	Rounds          int     `json:"rounds,omitempty"` // device runs: timed rounds, median kept
	// Busy is CPU seconds per wall second over the timed steps: below
	// Threads when the machine was shared.
	Busy float64 `json:"busy_threads,omitempty"`
}

// peak is the sgemm rate (FLOP/s) of an n x n x n product on the CPU
// backend with threads, the best of 4.
func peak(threads, n int) (float64, error) {
	be, err := backend.NewCPU(threads)
	if err != nil {
		return 0, err
	}
	defer be.Close()
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
	return 2 * float64(n) * float64(n) * float64(n) / best.Seconds(), nil
}

// cpuPeakN is the side of the CPU's peak sgemm: large enough that OpenBLAS
// runs at its rate, small enough to take a fraction of a second on 1 thread.
const cpuPeakN = 1536

// params are the command line.
type params struct {
	device            string
	steps, batch, seq int
	layers, heads     int
	width, vocab      int
	threads           int
	peakN             int
	peer              bool
	rounds            int
	mode              string
	cpuprofile        string
}

func main() {
	if err := execute(os.Args[1:], os.Stdout); err != nil {
		fail(err)
	}
}

// execute parses args, runs the benchmark and writes its JSON to w.
func execute(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("bench-train", flag.ContinueOnError)
	var p params
	fs.StringVar(&p.device, "device", "cpu", "where to run: cpu, sim (the simulated device) or cuda (GPU 0; needs -tags cuda)")
	fs.IntVar(&p.steps, "steps", 3, "timed steps per configuration (after one warm-up); on a device the median is kept")
	fs.IntVar(&p.batch, "batch", 4, "sequences per step")
	fs.IntVar(&p.seq, "seq", 128, "sequence length")
	fs.IntVar(&p.layers, "layers", 6, "transformer blocks")
	fs.IntVar(&p.heads, "heads", 6, "attention heads")
	fs.IntVar(&p.width, "width", 384, "channels")
	fs.IntVar(&p.vocab, "vocab", 4096, "vocabulary size")
	fs.IntVar(&p.threads, "threads", 0, "sim: C threads of the simulated device and of its peak sgemm (0: GOMAXPROCS); ignored elsewhere")
	fs.BoolVar(&p.peer, "peer", false, "cpu: also time the same GPT in PyTorch eager (scripts/install-peers.sh installs it), interleaved with ours")
	fs.IntVar(&p.rounds, "rounds", 3, "-peer: interleaved rounds (medians are reported)")
	fs.StringVar(&p.mode, "mode", "gpt", "gpt: the GPT's own Forward and Backward (MFU); checkpointing: the engine's activation checkpointing variants as ratios (-device is ignored: CPU at TP 2 and sim); ops: each CPU kernel's time per step on 1 and 2 threads (-device is ignored)")
	fs.StringVar(&p.cpuprofile, "cpuprofile", "", "write a pprof CPU profile of the run to this file")
	fs.IntVar(&p.peakN, "peak-n", 0, "side of the square sgemm of the peak (0: 1536 on cpu and sim, 8192 on cuda)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"rounds", p.rounds}, {"steps", p.steps}, {"batch", p.batch}, {"seq", p.seq}, {"layers", p.layers}, {"heads", p.heads}, {"width", p.width}, {"vocab", p.vocab}} {
		if f.v < 1 {
			return fmt.Errorf("-%s = %d: must be >= 1", f.name, f.v)
		}
	}
	if p.threads < 0 || p.peakN < 0 {
		return fmt.Errorf("-threads = %d, -peak-n = %d: must be >= 0", p.threads, p.peakN)
	}
	dev, err := tensor.ParseDevice(p.device)
	if err != nil {
		return fmt.Errorf("-device %q: %w (allowed: cpu, sim, cuda)", p.device, err)
	}
	if dev.Index != 0 {
		return fmt.Errorf("-device %q: only device 0 is benchmarked (allowed: cpu, sim, cuda)", p.device)
	}
	cfg := nn.GPTConfig{Layers: p.layers, Heads: p.heads, Width: p.width, Vocab: p.vocab, SeqLen: p.seq}
	if _, err := nn.NewGPT(cfg); err != nil {
		return fmt.Errorf("model -layers %d -heads %d -width %d -vocab %d -seq %d: %w", p.layers, p.heads, p.width, p.vocab, p.seq, err)
	}
	B, T := p.batch, p.seq
	N := cfg.NumParams() - cfg.SeqLen*cfg.Width
	teff := float64(T+1) / 2
	flopsPerToken := 6*float64(N) + 6*float64(cfg.Layers)*teff*float64(cfg.Width)*2
	out := map[string]any{
		"model":           map[string]int{"layers": cfg.Layers, "heads": cfg.Heads, "width": cfg.Width, "vocab": cfg.Vocab, "seq": T, "batch": B, "params": cfg.NumParams()},
		"flops_per_token": flopsPerToken,
		"gomaxprocs":      runtime.GOMAXPROCS(0),
	}
	if p.cpuprofile != "" {
		f, err := os.Create(p.cpuprofile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile %s: %w", p.cpuprofile, err)
		}
		defer pprof.StopCPUProfile()
	}
	r := rand.New(rand.NewPCG(1, 2))
	in, tg := make([]int32, B*T), make([]int32, B*T)
	for i := range in {
		in[i], tg[i] = int32(r.IntN(cfg.Vocab)), int32(r.IntN(cfg.Vocab))
	}
	switch p.mode {
	case "gpt":
	case "checkpointing":
		if err := runCheckpointing(p, cfg, in, tg, out); err != nil {
			return err
		}
		return json.NewEncoder(w).Encode(out)
	case "ops":
		if err := runOps(p, cfg, in, tg, out); err != nil {
			return err
		}
		return json.NewEncoder(w).Encode(out)
	default:
		return fmt.Errorf("-mode %q: allowed gpt, checkpointing, ops", p.mode)
	}
	if !dev.IsCPU() {
		if p.peer {
			return fmt.Errorf("-peer with -device %q: the peer runs on the CPU only (allowed: -device cpu)", p.device)
		}
		if err := runDevice(dev, p, cfg, flopsPerToken, in, tg, out); err != nil {
			return err
		}
		return json.NewEncoder(w).Encode(out)
	}
	peakN := cmp.Or(p.peakN, cpuPeakN)
	out["mfu_formula"] = "MFU = (6*N + 6*L*T_eff*C*2) * tokens_per_s / peak; N = params without wpe, T_eff = (T+1)/2; peak = the best of the run's sgemm " + strconv.Itoa(peakN) + "^3 timings on the same thread count (peak_sgemm_samples_gflops: before and after that count's runs, and in each peer round)"
	out["openblas_threads"] = "1 per call; the backend's pool splits rows"
	blas := csrc.BLAS()
	// the core fields are OpenBLAS's, linked whichever library runs the
	// products: nested under its name so an MKL run does not seem to use them
	out["blas"] = map[string]any{"library": blas.Library, "linear": blas.Linear, "openblas": map[string]any{"config": blas.Config, "core": blas.Core,
		"library_core": blas.LibraryCore, "cpu_core": blas.CPUCore, "reason": blas.Reason, "runs_products": blas.Library == "OpenBLAS"}}
	var runs []run
	// A peak is a best case: on a shared 2-vCPU machine one timing can
	// catch a slow minute (a 2-thread sgemm at half its rate) and push MFU
	// above 1. So each thread count's sgemm is timed before and after its
	// runs, and again in each peer round; MFU uses the best of all.
	peakSamples := map[int][]float64{}
	samplePeak := func(threads int) error {
		pk, err := peak(threads, peakN)
		peakSamples[threads] = append(peakSamples[threads], pk)
		return err
	}
	for _, threads := range []int{1, 2} {
		if err := samplePeak(threads); err != nil {
			return err
		}
		for _, ck := range []bool{false, true} {
			c := cfg
			c.Checkpointing.Enabled = ck
			res, err := bench(c, threads, p.steps, in, tg, B, T)
			if err != nil {
				return err
			}
			runs = append(runs, res)
		}
		if err := samplePeak(threads); err != nil {
			return err
		}
	}
	var peer *peerReport
	if p.peer {
		if peer, err = runPeer(context.Background(), cfg, p, p.rounds, in, tg, samplePeak); err != nil {
			return err
		}
		if peer.Unavailable != "" {
			out["peer"] = peer.Unavailable
		} else {
			out["peer"] = peer
		}
	}
	peaks, samples, peakFLOPs := map[string]float64{}, map[string][]float64{}, map[int]float64{}
	for th, s := range peakSamples {
		peakFLOPs[th] = slices.Max(s)
		peaks[fmt.Sprint(th)] = peakFLOPs[th] / 1e9
		for _, v := range s {
			samples[fmt.Sprint(th)] = append(samples[fmt.Sprint(th)], v/1e9)
		}
	}
	for i := range runs {
		runs[i].GFLOPs = flopsPerToken * runs[i].TokensPerSec / 1e9
		runs[i].MFU = flopsPerToken * runs[i].TokensPerSec / peakFLOPs[runs[i].Threads]
	}
	if peer != nil {
		peer.setMFU(flopsPerToken, peakFLOPs)
	}
	out["peak_sgemm_gflops"] = peaks
	out["peak_sgemm_samples_gflops"] = samples
	out["runs"] = runs
	return json.NewEncoder(w).Encode(out)
}

func bench(cfg nn.GPTConfig, threads, steps int, in, tg []int32, B, T int) (run, error) {
	be, err := backend.NewCPU(threads)
	if err != nil {
		return run{}, err
	}
	defer be.Close()
	g, free, err := newModel(cfg)
	if err != nil {
		return run{}, err
	}
	defer free()
	var loss float32
	var total, cpu time.Duration
	for s := 0; s <= steps; s++ {
		c0, t0 := benchutil.CPUTime(), time.Now()
		if loss, err = g.Forward(be, in, tg, B, T); err != nil {
			return run{}, err
		}
		if err := g.Backward(be); err != nil {
			return run{}, err
		}
		if s > 0 { // the first step allocates and warms caches
			total += time.Since(t0)
			cpu += benchutil.CPUTime() - c0
		}
	}
	st := g.ActivationStats()
	sec := total.Seconds() / float64(steps)
	return run{Threads: threads, Checkpointing: cfg.Checkpointing.Enabled, TokensPerSec: float64(B*T) / sec, StepSeconds: sec,
		ActivationBytes: st.Bytes, ScratchBytes: st.ScratchBytes, Loss: loss, Busy: cpu.Seconds() / total.Seconds()}, nil
}

// newModel builds cfg's GPT with its parameter buffers, initialised with
// seed 1; free releases both.
func newModel(cfg nn.GPTConfig) (g *nn.GPT, free func(), err error) {
	if g, err = nn.NewGPT(cfg); err != nil {
		return nil, nil, err
	}
	pb, err := nn.NewParamBuffers(g)
	if err != nil {
		g.Free()
		return nil, nil, err
	}
	free = func() { g.Free(); pb.Free() }
	if err := g.Init(1); err != nil {
		free()
		return nil, nil, err
	}
	return g, free, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-train:", err)
	os.Exit(1)
}
