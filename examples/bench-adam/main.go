// Command bench-adam measures the fused CPU AdamW step against the memory
// roof that bounds it, in one run, and prints one JSON object.
//
// The step is memory bound: per parameter it reads p, g, m, v and writes p,
// m, v (28 bytes in fp32; 30 with a bf16 copy of p; 22 with bf16 p and g).
// The roof is the step's own memory traffic without its math (the core's
// dg_roof_update: p, m, v += g in place, 28 bytes per parameter, the same
// prefetching and thread split), on the same thread count: a step at the
// roof spends nothing on arithmetic. The in-place axpy a += s*b over the
// same footprint is printed beside it for reference. STREAM triad (a Go loop,
// for reference), a plain scalar C AdamW loop (dg_adamw_naive_ref) and the
// 1- vs 2-thread speedup of a compute-only loop are printed alongside, the
// last because 2-vCPU machines sometimes put both threads on one core.
//
// With -device sim or cuda the step runs on that device's optimizer
// kernels (optim.KernelsFor: the simulated device's CPU kernels on its
// stream, or package cuda's), every tensor and the moments in device
// memory, against a roof measured on the device in the same run
// (device.go).
//
// With -peer (CPU only) it also times DeepSpeed's DeepSpeedCPUAdam and
// PyTorch's AdamW on the same sizes and thread counts, interleaved step by
// step with our step and the roof: a peer.py process per thread count
// holds the peers' optimizers and runs one step per request (peer.go,
// peer.py), from the venv that scripts/install-peers.sh makes; without it
// the "peer" field says so. Our tensors sit on transparent huge pages
// (csrc.Alloc); PyTorch's do only with THP_MEM_ALLOC_ENABLE=1, which
// -peer-thp sets for the peers, to compare like with like.
//
//	go run ./examples/bench-adam [-device cpu|sim|cuda] [-sizes 16,64] [-reps 5] [-threads N] [-peer [-rounds 3] [-peer-thp]]
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

type result struct {
	Case          string  `json:"case"`
	Params        int     `json:"params"`
	Threads       int     `json:"threads"`
	BytesPerParam int     `json:"bytes_per_param"`
	Seconds       float64 `json:"seconds_per_step"`
	ParamsPerSec  float64 `json:"params_per_s"`
	GBps          float64 `json:"effective_GB_s"`
	RoofGBps      float64 `json:"update_roof_GB_s"`
	OfRoof        float64 `json:"fraction_of_roof"`
}

type report struct {
	CPU            string             `json:"isa"`
	GOMAXPROCS     int                `json:"gomaxprocs"`
	Results        []result           `json:"results"`
	Roof           map[string]float64 `json:"update_roof_GB_s"`
	Axpy           map[string]float64 `json:"inplace_axpy_GB_s"`
	Triad          map[string]float64 `json:"stream_triad_go_GB_s"`
	NaiveParamsPS  map[string]float64 `json:"naive_scalar_c_params_per_s"`
	SpeedupVsNaive map[string]float64 `json:"fused_1thread_vs_naive"`
	ComputeSpeedup float64            `json:"compute_only_2thread_speedup"`
	// Peer is -peer's comparison (a peerReport), or why it did not run.
	Peer any `json:"peer,omitempty"`
}

// must2 is must for two results.
func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-adam:", err)
		os.Exit(1)
	}
	return a, b
}

func must[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-adam:", err)
		os.Exit(1)
	}
	return v
}

// fill touches every page (warming the buffer) with pseudo-random values
// in [-scale, scale]. Random, not a short repeating pattern: pages with equal
// contents can be merged by the host (same-page merging), and then reads hit
// a few physical pages in cache and report bandwidth the memory never gave.
func fill(t *tensor.Tensor, scale float32) {
	r := rand.New(rand.NewPCG(uint64(t.Numel()), 7))
	if t.DType() == tensor.Float32 {
		d := must(t.Float32s())
		for i := range d {
			d[i] = scale * (2*r.Float32() - 1)
		}
		return
	}
	d := must(t.Uint16s())
	for i := range d {
		d[i] = tensor.Float32ToBFloat16(scale * (2*r.Float32() - 1))
	}
}

// best returns the fastest of reps timings of f.
func best(reps int, f func()) float64 {
	b := math.Inf(1)
	for range reps {
		t0 := time.Now()
		f()
		b = math.Min(b, time.Since(t0).Seconds())
	}
	return b
}

func main() {
	if err := execute(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-adam:", err)
		os.Exit(1)
	}
}

// execute parses args, runs the benchmark and writes its JSON to w.
func execute(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("bench-adam", flag.ContinueOnError)
	device := fs.String("device", "cpu", "where to run: cpu, sim (the simulated device) or cuda (GPU 0; needs -tags cuda)")
	sizesFlag := fs.String("sizes", "16,64", "parameter counts in Mi")
	reps := fs.Int("reps", 5, "timed repetitions (best is kept)")
	threads := fs.Int("threads", 0, "sim: C threads of the simulated device (0: GOMAXPROCS); ignored elsewhere")
	peer := fs.Bool("peer", false, "cpu: also time DeepSpeedCPUAdam and PyTorch's AdamW (scripts/install-peers.sh installs them), interleaved with ours and the roof")
	rounds := fs.Int("rounds", 3, "-peer: interleaved rounds (medians are reported)")
	peerTHP := fs.Bool("peer-thp", false, "-peer: run the peers with PyTorch's THP_MEM_ALLOC_ENABLE=1, their tensors on huge pages as ours are (PyTorch's default is off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *reps < 1 {
		return fmt.Errorf("-reps = %d: must be >= 1", *reps)
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds = %d: must be >= 1", *rounds)
	}
	if *peerTHP && !*peer {
		return fmt.Errorf("-peer-thp without -peer: it sets how the peers allocate (allowed: with -peer)")
	}
	if *threads < 0 {
		return fmt.Errorf("-threads = %d: must be >= 0 (0: GOMAXPROCS)", *threads)
	}
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 1<<14 {
			return fmt.Errorf("-sizes %q: %q is not a count of Mi parameters in [1, 16384]", *sizesFlag, s)
		}
		sizes = append(sizes, n<<20)
	}
	dev, err := tensor.ParseDevice(*device)
	if err != nil {
		return fmt.Errorf("-device %q: %w (allowed: cpu, sim, cuda)", *device, err)
	}
	if dev.Index != 0 {
		return fmt.Errorf("-device %q: only device 0 is benchmarked (allowed: cpu, sim, cuda)", *device)
	}
	var rep any
	if dev.IsCPU() {
		r := report{CPU: csrc.BestISA().String(), GOMAXPROCS: runtime.GOMAXPROCS(0), Roof: map[string]float64{}, Axpy: map[string]float64{},
			Triad: map[string]float64{}, NaiveParamsPS: map[string]float64{}, SpeedupVsNaive: map[string]float64{}}
		r.ComputeSpeedup = computeSpeedup()
		for _, n := range sizes {
			benchSize(&r, n, *reps)
		}
		if *peer {
			if r.Peer, err = runPeers(context.Background(), sizes, *reps, *rounds, *peerTHP); err != nil {
				return err
			}
		}
		rep = r
	} else if *peer {
		return fmt.Errorf("-peer with -device %q: the peers run on the CPU only (allowed: -device cpu)", *device)
	} else if rep, err = runDevice(dev, sizes, *reps, cmp.Or(*threads, runtime.GOMAXPROCS(0))); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// adamCases are the dtype layouts timed, with the bytes a step moves per
// parameter.
var adamCases = []struct {
	name       string
	p, g       tensor.DType
	copy       bool
	bytesPerEl int
}{
	{"adamw fp32", tensor.Float32, tensor.Float32, false, 28},
	{"adamw fp32 + bf16 copy", tensor.Float32, tensor.Float32, true, 30},
	{"adamw bf16 params/grads, fp32 moments", tensor.BFloat16, tensor.BFloat16, false, 22},
}

func benchSize(rep *report, n, reps int) {
	key := func(th int) string { return fmt.Sprintf("%dM/%dt", n>>20, th) }
	// the axpy reference runs a += s*b over the optimizer's fp32 footprint
	a, b := must(tensor.Empty(tensor.Float32, 2*n)), must(tensor.Empty(tensor.Float32, 2*n))
	fill(a, 1)
	fill(b, 1)
	axpyOn := func(be *backend.CPU) func() error {
		return func() error { return be.Axpy(1e-3, []*tensor.Tensor{b}, []*tensor.Tensor{a}) }
	}
	// the update roof runs on the fp32 step's own buffers; the cases with
	// half-precision params compare with it on four fp32 buffers of their
	// own, allocated as the step allocates its moments
	var spare [4]*tensor.Tensor
	for i := range spare {
		spare[i] = must(tensor.Empty(tensor.Float32, n))
		fill(spare[i], 1)
		defer spare[i].Free()
	}
	roofOn := func(be *backend.CPU, o optim.Optimizer, g optim.ParamGroup) func() error {
		if g.Params[0].DType() == tensor.Float32 && g.Grads[0].DType() == tensor.Float32 {
			return updateRoof(be, o, g)
		}
		p, gr, m, v := spare[0].Ptr(), spare[1].Ptr(), spare[2].Ptr(), spare[3].Ptr()
		return func() error { return be.Ctx().RoofUpdate(p, gr, m, v, n, 0) }
	}
	roofGBps := func(d time.Duration) float64 { return 28 * float64(n) / d.Seconds() / 1e9 }
	for _, th := range []int{1, 2} {
		rep.Triad[key(th)] = triad(a, b, th, reps)
	}
	defer a.Free()
	defer b.Free()

	for _, c := range adamCases {
		g := optim.ParamGroup{Name: "shard",
			Params: []*tensor.Tensor{must(tensor.Empty(c.p, n))},
			Grads:  []*tensor.Tensor{must(tensor.Empty(c.g, n))}}
		fill(g.Params[0], 1)
		fill(g.Grads[0], 1)
		if c.copy {
			g.Copies = []*tensor.Tensor{must(tensor.Empty(tensor.BFloat16, n))}
			fill(g.Copies[0], 0)
		}
		for _, th := range []int{1, 2} {
			be := must(backend.NewCPU(th))
			o := must(optim.New("AdamW", map[string]any{"lr": 1e-4, "weight_decay": 0.01}, be))
			must(0, o.Step(g, 1e-4, 1)) // allocates and touches the moments
			// the roof is timed alternately with the step, so that a drift
			// of the machine's bandwidth hits both alike
			kd, rd := must2(benchutil.Interleaved(reps, func() error { return o.Step(g, 1e-4, 1) }, roofOn(be, o, g)))
			if c.name == "adamw fp32" {
				_, ad := must2(benchutil.Interleaved(reps, axpyOn(be), axpyOn(be)))
				rep.Axpy[key(th)] = 12 * float64(2*n) / ad.Seconds() / 1e9
			}
			sec := kd.Seconds()
			roof := roofGBps(rd)
			rep.Roof[key(th)] = max(rep.Roof[key(th)], roof)
			gbs := float64(c.bytesPerEl) * float64(n) / sec / 1e9
			rep.Results = append(rep.Results, result{Case: c.name, Params: n, Threads: th, BytesPerParam: c.bytesPerEl,
				Seconds: sec, ParamsPerSec: float64(n) / sec, GBps: gbs, RoofGBps: roof, OfRoof: gbs / roof})
			if c.name == "adamw fp32" && th == 1 {
				naive := naiveRate(g, o, n, reps)
				rep.NaiveParamsPS[key(1)] = naive
				rep.SpeedupVsNaive[key(1)] = float64(n) / sec / naive
			}
			o.Close()
			be.Close()
		}
		for _, l := range [][]*tensor.Tensor{g.Params, g.Grads, g.Copies} {
			for _, t := range l {
				t.Free()
			}
		}
	}
}

// naiveRate times the plain scalar C loop on the same fp32 buffers.
func naiveRate(g optim.ParamGroup, o optim.Optimizer, n, reps int) float64 {
	st := o.State(g.Name)
	hp := &csrc.OptimHParams{Kind: csrc.OptimAdam, Step: 2, LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
		WeightDecay: 0.01, AdamWMode: true, BiasCorrection: true, GradScale: 1}
	sec := best(reps, func() {
		must(0, csrc.AdamWNaiveRef(hp, g.Params[0].Ptr(), g.Grads[0].Ptr(), st["exp_avg"][0].Ptr(),
			st["exp_avg_sq"][0].Ptr(), int64(n)))
	})
	return float64(n) / sec
}

// triad is STREAM's a = b + s*c in Go over th goroutines (24 B/element); it
// reuses the roof's buffers, splitting b into the two sources.
func triad(a, b *tensor.Tensor, th, reps int) float64 {
	x, y := must(a.Float32s()), must(b.Float32s())
	half := len(y) / 2
	dst, s1, s2 := x[:half], y[:half], y[half:]
	sec := best(reps, func() {
		var wg sync.WaitGroup
		for t := range th {
			lo, hi := t*half/th, (t+1)*half/th
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, p, q := dst[lo:hi], s1[lo:hi], s2[lo:hi]
				for i := range d {
					d[i] = p[i] + 3*q[i]
				}
			}()
		}
		wg.Wait()
	})
	return 12 * float64(2*half) / sec / 1e9
}

// computeSpeedup runs a register-only loop on 1 then 2 goroutines (each
// doing the same work) and returns 2*t1/t2: ~2 with two real cores, ~1 when
// both threads share one.
func computeSpeedup() float64 {
	work := func() float64 {
		x := 1.0
		for i := 0; i < 200_000_000; i++ {
			x = x*0.9999999 + 1e-7
		}
		return x
	}
	run := func(k int) float64 {
		var wg sync.WaitGroup
		sink := make([]float64, k)
		t0 := time.Now()
		for j := range k {
			wg.Add(1)
			go func() { defer wg.Done(); sink[j] = work() }()
		}
		wg.Wait()
		_ = sink
		return time.Since(t0).Seconds()
	}
	t1, t2 := run(1), run(2)
	return 2 * t1 / t2
}

// updateRoof is the update roof on the step's own fp32 buffers: g's
// params and grads, o's moments (s = 0 leaves them as they were).
func updateRoof(be *backend.CPU, o optim.Optimizer, g optim.ParamGroup) func() error {
	st := o.State(g.Name)
	p, gr, m, v := g.Params[0].Ptr(), g.Grads[0].Ptr(), st["exp_avg"][0].Ptr(), st["exp_avg_sq"][0].Ptr()
	n := g.Params[0].Numel()
	return func() error { return be.Ctx().RoofUpdate(p, gr, m, v, n, 0) }
}
