// Command bench-kernels measures the C core's bandwidth kernels (casts, sum of
// squares, inf/nan check, bucket pack) on 1 and 2 threads and prints one JSON
// object. Each kernel stands next to a roof with the same access pattern
// measured in the same run, interleaved with it: for a cast the same bytes
// read and written with no conversion (a widening cast writes twice what it
// reads, so a memcpy is not its pattern; the memcpy of the smaller side is
// reported beside it), a threaded memcpy for packing, a threaded
// read-and-sum for the reductions.
// Every case is timed in two passes over the list, forward then backward, and
// keeps the best of each side's reps over both passes (ratio: best over
// best), and the median of the per-rep ratios (pair_ratio_median: each rep's
// kernel against the roof run just before it, which the machine's drift
// between reps does not move). It also reports the cost of one cgo call and a 1- vs 2-thread compute probe.
// A size is the kernel's input: "64 MiB" means 64 MiB of float32 for the f32
// cases and 64 MiB of halves (twice the elements) for the bf16/f16 ones.
//
//	go run ./examples/bench-kernels [-mib 64,256] [-reps 7]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
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
	Bytes     int     `json:"bytes"`      // bytes read + written per call (input is mib MiB)
	GBps      float64 `json:"gbps"`       // best of reps
	Roof      string  `json:"roof"`       // what the roof is
	RoofGBps  float64 `json:"roof_gbps"`  // best of reps, interleaved with the kernel
	Ratio     float64 `json:"ratio"`      // gbps / roof_gbps
	MeetsGoal bool    `json:"meets_goal"` // ratio >= Report.Target
	// PairRatio is the median over every rep of both passes of the
	// kernel's rate over the roof's in the same rep (the roof ran just
	// before it): the ratio with the machine's drift between reps taken
	// out, where ratio, two bests from different moments, moves with it.
	PairRatio float64 `json:"pair_ratio_median"`
	// Kernels that write (casts, pack) also stand next to the read roof of
	// their input: a cast from float32 reads twice what it writes, and one
	// core's read bandwidth, not a symmetric copy's, is then what binds it.
	ReadRoofGBps float64 `json:"read_roof_gbps,omitempty"` // read-and-sum of the kernel's input bytes
	ReadRatio    float64 `json:"read_ratio,omitempty"`     // input bytes/s over read_roof_gbps
	// Casts also stand next to a memcpy of their smaller side (the roof
	// this benchmark used before the cast roof), read plus written bytes.
	CopyRoofGBps float64 `json:"copy_roof_gbps,omitempty"`
	CopyRatio    float64 `json:"copy_ratio,omitempty"` // gbps / copy_roof_gbps
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
	reps := flag.Int("reps", 7, "timed rounds per kernel in each of the two passes (best is reported)")
	flag.Parse()
	if err := run(os.Stdout, *mibs, *reps); err != nil {
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

// run measures every size in mibList (comma separated MiB) and writes the
// report to w.
func run(w io.Writer, mibList string, reps int) error {
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
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// buffers holds one size's operands. Every case reads an input of exactly
// the labelled size: nf float32 or nh = 2*nf halves.
type buffers struct {
	f32, h16, bf16  *tensor.Tensor // inputs: nf float32, nh float16, nh bfloat16
	f32Out          *tensor.Tensor // nh float32: half->f32 cast output
	h16Out, bf16Out *tensor.Tensor // nf halves each: f32->half cast outputs
	flat            *tensor.Tensor // nf float32, the pack target
}

func (bs *buffers) all() []*tensor.Tensor {
	return []*tensor.Tensor{bs.f32, bs.h16, bs.bf16, bs.f32Out, bs.h16Out, bs.bf16Out, bs.flat}
}

// alloc sizes everything for an input of inBytes bytes.
func alloc(b *backend.CPU, inBytes int) (*buffers, error) {
	nf, nh := inBytes/4, inBytes/2
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
	bs.f32, bs.h16, bs.bf16 = mk(tensor.Float32, nf), mk(tensor.Float16, nh), mk(tensor.BFloat16, nh)
	bs.f32Out, bs.h16Out, bs.bf16Out = mk(tensor.Float32, nh), mk(tensor.Float16, nf), mk(tensor.BFloat16, nf)
	bs.flat = mk(tensor.Float32, nf)
	// the largest memcpy roof: half->f32 cast, nh*(2+4) bytes moved
	if err != nil {
		bs.free()
		return nil, err
	}
	// touch every page and give the data realistic values; the halves are
	// rounded from normal float32s
	r := rand.New(rand.NewPCG(1, 1))
	for _, t := range []*tensor.Tensor{bs.f32, bs.f32Out} {
		f, _ := t.Float32s()
		for i := range f {
			f[i] = float32(r.NormFloat64())
		}
	}
	T := func(ts ...*tensor.Tensor) []*tensor.Tensor { return ts }
	if err := b.Cast(T(bs.h16), T(bs.f32Out)); err != nil {
		return nil, err
	}
	if err := b.Cast(T(bs.bf16), T(bs.f32Out)); err != nil {
		return nil, err
	}
	// Every buffer, the roofs' too, holds data that looks like data: on
	// these machines copying mostly-zero pages runs about 25% faster than
	// copying real values, which would inflate a roof built on them.
	for _, t := range []*tensor.Tensor{bs.h16Out, bs.bf16Out, bs.flat} {
		raw, _ := t.RawBytes()
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
	}
	return &bs, nil
}

func (bs *buffers) free() {
	for _, t := range bs.all() {
		if t != nil {
			t.Free()
		}
	}
}

func benchSize(b *backend.CPU, mib, reps int) ([]Result, error) {
	if err := b.SetThreads(2); err != nil {
		return nil, err
	}
	in := mib << 20 // input bytes of every case
	nf, nh := in/4, in/2
	bs, err := alloc(b, in)
	if err != nil {
		return nil, err
	}
	defer bs.free()
	T := func(ts ...*tensor.Tensor) []*tensor.Tensor { return ts }
	ctx := b.Ctx()
	// Roofs run between the kernel's own buffers: where a buffer's pages
	// sit changes bandwidth by itself by up to 20% on these machines. The
	// memcpy beside a cast copies as many bytes as its smaller side holds
	// (a memcpy cannot read 4 bytes per 2 written); pack's copies its
	// whole input. Both count bytes read plus bytes written.
	copyRoof := func(dst, src *tensor.Tensor, bytes int) func() error {
		return func() error { return ctx.RoofCopy(dst.Ptr(), src.Ptr(), bytes) }
	}
	// A cast's roof reads and writes what the cast does, without converting.
	castRoof := func(dst, src *tensor.Tensor) func() error {
		db, sb := dst.Numel()*dst.DType().Size(), src.Numel()*src.DType().Size()
		return func() error { return ctx.RoofCast(dst.Ptr(), db, src.Ptr(), sb) }
	}
	readRoof := func(p unsafe.Pointer, bytes int) func() error {
		return func() error { _, err := ctx.RoofRead(p, bytes); return err }
	}
	// four pieces, like a bucket of several parameters
	q := nf / 4
	var packSrcs []*tensor.Tensor
	offs := []int{0, q, 2 * q, 3 * q}
	for i := 0; i < 4; i++ {
		sz := q
		if i == 3 {
			sz = nf - 3*q
		}
		v, _ := bs.f32.Slice(offs[i], sz)
		packSrcs = append(packSrcs, v)
	}
	type kcase struct {
		name  string
		bytes int
		roof  string
		rf    func() error
		kf    func() error
		src   unsafe.Pointer // writing kernels: the input, for the read roof
		rb    int            // bytes the roof moves, when not the kernel's
		cf    func() error   // casts: the memcpy of the smaller side
		cb    int            // bytes that memcpy moves (read + written)
	}
	sumsq := func(t *tensor.Tensor) func() error {
		return func() error { _, err := b.SumSquares(T(t), nil); return err }
	}
	nonfinite := func(t *tensor.Tensor) func() error {
		return func() error { _, err := b.NonFinite(T(t)); return err }
	}
	cases := []kcase{
		{"cast f32->bf16", in + 2*nf, "cast traffic", castRoof(bs.bf16Out, bs.f32), func() error { return b.Cast(T(bs.bf16Out), T(bs.f32)) }, bs.f32.Ptr(), 0, copyRoof(bs.bf16Out, bs.f32, 2*nf), 2 * (2 * nf)},
		{"cast f32->f16", in + 2*nf, "cast traffic", castRoof(bs.h16Out, bs.f32), func() error { return b.Cast(T(bs.h16Out), T(bs.f32)) }, bs.f32.Ptr(), 0, copyRoof(bs.h16Out, bs.f32, 2*nf), 2 * (2 * nf)},
		{"cast bf16->f32", in + 4*nh, "cast traffic", castRoof(bs.f32Out, bs.bf16), func() error { return b.Cast(T(bs.f32Out), T(bs.bf16)) }, bs.bf16.Ptr(), 0, copyRoof(bs.f32Out, bs.bf16, in), 2 * in},
		{"cast f16->f32", in + 4*nh, "cast traffic", castRoof(bs.f32Out, bs.h16), func() error { return b.Cast(T(bs.f32Out), T(bs.h16)) }, bs.h16.Ptr(), 0, copyRoof(bs.f32Out, bs.h16, in), 2 * in},
		{"sumsq f32", in, "read-and-sum", readRoof(bs.f32.Ptr(), in), sumsq(bs.f32), nil, 0, nil, 0},
		{"sumsq bf16", in, "read-and-sum", readRoof(bs.bf16.Ptr(), in), sumsq(bs.bf16), nil, 0, nil, 0},
		{"sumsq f16", in, "read-and-sum", readRoof(bs.h16.Ptr(), in), sumsq(bs.h16), nil, 0, nil, 0},
		{"nonfinite f32", in, "read-and-sum", readRoof(bs.f32.Ptr(), in), nonfinite(bs.f32), nil, 0, nil, 0},
		{"nonfinite bf16", in, "read-and-sum", readRoof(bs.bf16.Ptr(), in), nonfinite(bs.bf16), nil, 0, nil, 0},
		{"nonfinite f16", in, "read-and-sum", readRoof(bs.h16.Ptr(), in), nonfinite(bs.h16), nil, 0, nil, 0},
		{"pack f32 x4", 2 * in, "memcpy", copyRoof(bs.flat, bs.f32, in), func() error { return b.Pack(bs.flat, offs, packSrcs) }, bs.f32.Ptr(), 0, nil, 0},
	}
	var out []Result
	for _, th := range []int{1, 2} {
		if err := b.SetThreads(th); err != nil {
			return nil, err
		}
		// warm every case and roof once before timing any: the first case
		// timed after a thread-count change read 0.07-0.1 low otherwise,
		// whichever kernel it was
		for _, c := range cases {
			if err := c.kf(); err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			if err := c.rf(); err != nil {
				return nil, fmt.Errorf("%s roof: %w", c.name, err)
			}
			if c.cf != nil {
				if err := c.cf(); err != nil {
					return nil, fmt.Errorf("%s memcpy: %w", c.name, err)
				}
			}
		}
		// Each case is timed in two passes over the list, forward then
		// backward, and keeps its best: the first case timed in a pass read
		// 0.05-0.1 low whichever kernel it was (f32->bf16 and f32->f16
		// swapped places and results), with or without more warming.
		kd, rd, rr, cd := make([]time.Duration, len(cases)), make([]time.Duration, len(cases)), make([]time.Duration, len(cases)), make([]time.Duration, len(cases))
		pairs := make([][]float64, len(cases))
		for i := range cases {
			kd[i], rd[i], rr[i], cd[i] = math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64
		}
		for pass := 0; pass < 2; pass++ {
			for j := range cases {
				i := j
				if pass == 1 {
					i = len(cases) - 1 - j
				}
				c := cases[i]
				k, r, p, err := benchutil.InterleavedPairs(reps, c.kf, c.rf)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", c.name, err)
				}
				kd[i], rd[i] = min(kd[i], k), min(rd[i], r)
				pairs[i] = append(pairs[i], p...)
				if c.src != nil {
					_, r, err := benchutil.Interleaved(reps, c.kf, readRoof(c.src, in))
					if err != nil {
						return nil, fmt.Errorf("%s: %w", c.name, err)
					}
					rr[i] = min(rr[i], r)
				}
				if c.cf != nil {
					_, r, err := benchutil.Interleaved(reps, c.kf, c.cf)
					if err != nil {
						return nil, fmt.Errorf("%s: %w", c.name, err)
					}
					cd[i] = min(cd[i], r)
				}
			}
		}
		for i, c := range cases {
			rb := c.bytes
			if c.rb > 0 {
				rb = c.rb
			}
			k, r := benchutil.GBps(c.bytes, kd[i]), benchutil.GBps(rb, rd[i])
			// a pair is roof time over kernel time; rates divide bytes by them
			pr := benchutil.Median(pairs[i]) * float64(c.bytes) / float64(rb)
			res := Result{Kernel: c.name, MiB: mib, Threads: th, Bytes: c.bytes, GBps: k, Roof: c.roof, RoofGBps: r, Ratio: k / r, PairRatio: pr}
			if c.src != nil {
				res.ReadRoofGBps = benchutil.GBps(in, rr[i])
				res.ReadRatio = benchutil.GBps(in, kd[i]) / res.ReadRoofGBps
			}
			if c.cf != nil {
				res.CopyRoofGBps = benchutil.GBps(c.cb, cd[i])
				res.CopyRatio = k / res.CopyRoofGBps
			}
			out = append(out, res)
		}
	}
	return out, nil
}
