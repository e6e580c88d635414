// Command bench-kernels measures the C core's bandwidth kernels (casts, sum of
// squares, inf/nan check, bucket pack) on 1 and 2 threads and prints one JSON
// object. Each kernel stands next to a roof with the same access pattern
// measured in the same run, interleaved with it: a threaded memcpy of the same
// bytes for casts and packing, a threaded read-and-sum for the reductions. It
// also reports the cost of one cgo call and a 1- vs 2-thread compute probe.
//
//	go run ./examples/bench-kernels [-mib 64,256] [-reps 7]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Result is one kernel at one size and thread count.
type Result struct {
	Kernel    string  `json:"kernel"`
	MiB       int     `json:"mib"`        // size of the kernel's input
	Threads   int     `json:"threads"`    // C pool threads
	Bytes     int     `json:"bytes"`      // bytes read + written per call
	GBps      float64 `json:"gbps"`       // best of reps
	Roof      string  `json:"roof"`       // what the roof is
	RoofGBps  float64 `json:"roof_gbps"`  // best of reps, interleaved with the kernel
	Ratio     float64 `json:"ratio"`      // gbps / roof_gbps
	MeetsGoal bool    `json:"meets_goal"` // ratio >= Report.Target
}

// Report is the whole output.
type Report struct {
	Machine     benchutil.Machine     `json:"machine"`
	ISA         string                `json:"isa"`
	CgoCallNs   float64               `json:"cgo_call_ns"`
	ThreadProbe benchutil.ThreadProbe `json:"thread_probe"`
	Target      float64               `json:"target_ratio"`
	Results     []Result              `json:"results"`
}

func main() {
	mibs := flag.String("mib", "64,256", "input sizes in MiB, comma separated")
	reps := flag.Int("reps", 7, "timed rounds per kernel (best is reported)")
	flag.Parse()
	if err := run(*mibs, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "bench-kernels:", err)
		os.Exit(1)
	}
}

// cgoCallNs times a trivial C call.
func cgoCallNs() float64 {
	const n = 2_000_000
	s := 0
	t0 := time.Now()
	for i := 0; i < n; i++ {
		s += csrc.DTypeSize(csrc.F32)
	}
	d := time.Since(t0)
	if s != 4*n {
		panic("dg_dtype_size")
	}
	return float64(d.Nanoseconds()) / n
}

func run(mibList string, reps int) error {
	b, err := backend.NewCPU(2)
	if err != nil {
		return err
	}
	defer b.Close()
	rep := Report{Machine: benchutil.ThisMachine(), ISA: b.ISA().String(), CgoCallNs: cgoCallNs(), ThreadProbe: benchutil.ProbeThreads(), Target: 0.9}
	for _, s := range strings.Split(mibList, ",") {
		mib, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || mib <= 0 {
			return fmt.Errorf("-mib: %q is not a positive integer", s)
		}
		res, err := benchSize(b, mib, reps)
		if err != nil {
			return err
		}
		rep.Results = append(rep.Results, res...)
	}
	for i := range rep.Results {
		rep.Results[i].MeetsGoal = rep.Results[i].Ratio >= rep.Target
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

type buffers struct {
	f32, f32b *tensor.Tensor // n float32
	h16, bf16 *tensor.Tensor // n halves
	flat      *tensor.Tensor // n float32, the pack target
	roofSrc   *tensor.Tensor // bytes for the memcpy roof
	roofDst   *tensor.Tensor
}

func alloc(n int) (*buffers, error) {
	var bs buffers
	var err error
	mk := func(dt tensor.DType, k int) *tensor.Tensor {
		if err != nil {
			return nil
		}
		var t *tensor.Tensor
		t, err = tensor.Empty(dt, k)
		return t
	}
	bs.f32, bs.f32b = mk(tensor.Float32, n), mk(tensor.Float32, n)
	bs.h16, bs.bf16 = mk(tensor.Float16, n), mk(tensor.BFloat16, n)
	bs.flat = mk(tensor.Float32, n)
	bs.roofSrc, bs.roofDst = mk(tensor.Uint8, 4*n), mk(tensor.Uint8, 4*n)
	if err != nil {
		return nil, err
	}
	// touch every page and give the data realistic values
	r := rand.New(rand.NewPCG(1, 1))
	f, _ := bs.f32.Float32s()
	for i := range f {
		f[i] = float32(r.NormFloat64())
	}
	for _, t := range []*tensor.Tensor{bs.f32b, bs.h16, bs.bf16, bs.flat, bs.roofSrc, bs.roofDst} {
		raw, _ := t.RawBytes()
		for i := 0; i < len(raw); i += 4096 {
			raw[i] = 1
		}
	}
	return &bs, nil
}

func (bs *buffers) free() {
	for _, t := range []*tensor.Tensor{bs.f32, bs.f32b, bs.h16, bs.bf16, bs.flat, bs.roofSrc, bs.roofDst} {
		t.Free()
	}
}

func benchSize(b *backend.CPU, mib, reps int) ([]Result, error) {
	n := mib << 20 / 4 // float32 elements in the input
	bs, err := alloc(n)
	if err != nil {
		return nil, err
	}
	defer bs.free()
	T := func(ts ...*tensor.Tensor) []*tensor.Tensor { return ts }
	ctx := b.Ctx()
	copyRoof := func(bytes int) func() error {
		return func() error {
			return ctx.RoofCopy(bs.roofDst.Ptr(), bs.roofSrc.Ptr(), bytes)
		}
	}
	readRoof := func(p unsafe.Pointer, bytes int) func() error {
		return func() error { _, err := ctx.RoofRead(p, bytes); return err }
	}
	// four pieces, like a bucket of several parameters
	q := n / 4
	var packSrcs []*tensor.Tensor
	offs := []int{0, q, 2 * q, 3 * q}
	for i := 0; i < 4; i++ {
		sz := q
		if i == 3 {
			sz = n - 3*q
		}
		v, _ := bs.f32b.Slice(offs[i], sz)
		packSrcs = append(packSrcs, v)
	}
	type kcase struct {
		name  string
		bytes int
		roof  string
		rf    func() error
		kf    func() error
	}
	cases := []kcase{
		{"cast f32->bf16", 6 * n, "memcpy", copyRoof(3 * n), func() error { return b.Cast(T(bs.bf16), T(bs.f32)) }},
		{"cast f32->f16", 6 * n, "memcpy", copyRoof(3 * n), func() error { return b.Cast(T(bs.h16), T(bs.f32)) }},
		{"cast bf16->f32", 6 * n, "memcpy", copyRoof(3 * n), func() error { return b.Cast(T(bs.f32b), T(bs.bf16)) }},
		{"sumsq f32", 4 * n, "read-and-sum", readRoof(bs.f32.Ptr(), 4*n), func() error { _, err := b.SumSquares(T(bs.f32), nil); return err }},
		{"sumsq bf16", 2 * n, "read-and-sum", readRoof(bs.bf16.Ptr(), 2*n), func() error { _, err := b.SumSquares(T(bs.bf16), nil); return err }},
		{"nonfinite f32", 4 * n, "read-and-sum", readRoof(bs.f32.Ptr(), 4*n), func() error { _, err := b.NonFinite(T(bs.f32)); return err }},
		{"pack f32 x4", 8 * n, "memcpy", copyRoof(4 * n), func() error { return b.Pack(bs.flat, offs, packSrcs) }},
	}
	var out []Result
	for _, th := range []int{1, 2} {
		if err := b.SetThreads(th); err != nil {
			return nil, err
		}
		for _, c := range cases {
			if err := c.kf(); err != nil { // warm
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			kd, rd, err := benchutil.Interleaved(reps, c.kf, c.rf)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			k, r := benchutil.GBps(c.bytes, kd), benchutil.GBps(c.bytes, rd)
			out = append(out, Result{Kernel: c.name, MiB: mib, Threads: th, Bytes: c.bytes, GBps: k, Roof: c.roof, RoofGBps: r, Ratio: k / r})
		}
	}
	return out, nil
}
