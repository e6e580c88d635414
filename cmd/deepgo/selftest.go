package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
)

func init() {
	register(command{name: "selftest", help: "run every native kernel against a float64 Go reference", run: runSelftest})
}

// selftest checks each kernel of the CPU core, on every instruction set this
// CPU has, against a float64 reference computed in Go, and prints a table:
// the worst error in units in the last place of the result dtype (0 for the
// kernels that must be bit-exact) and the best throughput of fifteen timed rounds.
func runSelftest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("selftest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 1<<20, "elements per kernel call")
	threads := fs.Int("threads", 0, "threads (0: one per CPU)")
	gemm := fs.Int("sgemm", 1024, "n of the n×n×n sgemm timed on one thread (0: skip)")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	for _, c := range []struct {
		name     string
		v, least int
	}{{"-n", *n, 1}, {"-threads", *threads, 0}, {"-sgemm", *gemm, 0}} {
		if c.v < c.least {
			fmt.Fprintf(stderr, "deepgo selftest: %s %d: must be at least %d\n", c.name, c.v, c.least)
			return 2
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "deepgo selftest: unexpected argument %q: selftest takes flags only\n", fs.Arg(0))
		return 2
	}
	fmt.Fprintf(stdout, "deepgo selftest: %d elements, best ISA %v\n", *n, csrc.BestISA())
	if err := blasReport(stdout, *gemm); err != nil {
		fmt.Fprintln(stderr, "deepgo selftest:", err)
		return 1
	}
	if err := hugePagesReport(stdout); err != nil {
		fmt.Fprintln(stderr, "deepgo selftest:", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "kernel\tdtype\tisa\tthreads\tmax err (ulp)\tallowed\tGB/s\tresult")
	failed := 0
	isas := []csrc.ISA{csrc.ISAScalar}
	for _, i := range []csrc.ISA{csrc.ISAAVX2, csrc.ISAAVX512} {
		if csrc.BestISA() >= i {
			isas = append(isas, i)
		}
	}
	for _, isa := range isas {
		b, err := backend.NewCPU(*threads)
		if err != nil {
			fmt.Fprintln(stderr, "deepgo selftest:", err)
			return 1
		}
		if err := b.SetISA(isa); err != nil {
			fmt.Fprintln(stderr, "deepgo selftest:", err)
			return 1
		}
		for _, c := range selftestCases {
			for _, dt := range c.dtypes {
				r := c.run(b, dt, *n)
				status := "PASS"
				if r.err != nil || r.ulps > c.allowed {
					status = "FAIL"
					failed++
				}
				if r.err != nil {
					status += " (" + r.err.Error() + ")"
				}
				fmt.Fprintf(tw, "%s\t%v\t%v\t%d\t%.3g\t%g\t%.2f\t%s\n", c.name, dt, isa, b.Threads(), r.ulps, c.allowed, r.gbps, status)
			}
		}
		b.Close()
	}
	tw.Flush()
	if failed > 0 {
		fmt.Fprintf(stdout, "%d FAILED\n", failed)
		return 1
	}
	fmt.Fprintln(stdout, "all kernels PASS")
	return 0
}

type stResult struct {
	ulps float64 // worst error in ulps of the result dtype
	gbps float64
	err  error
}

type stCase struct {
	name    string
	dtypes  []tensor.DType
	allowed float64
	run     func(b *backend.CPU, dt tensor.DType, n int) stResult
}

var halfAndFloat = []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16}

var selftestCases = []stCase{
	{"cast from f32", []tensor.DType{tensor.Float16, tensor.BFloat16}, 0, stCastDown},
	{"cast to f32", []tensor.DType{tensor.Float16, tensor.BFloat16}, 0, stCastUp},
	{"scale", halfAndFloat, 1, stScale},
	{"axpy", halfAndFloat, 1, stAxpy},
	{"sumsq (rel)", halfAndFloat, 1e-12, stSumsq},
	{"nonfinite", halfAndFloat, 0, stNonFinite},
	{"pack+unpack", halfAndFloat, 0, stPack},
	{"reduce sum x4", halfAndFloat, 3, stReduce},
}

// ulpErr is |got-want| in units of the spacing of dt at want.
func ulpErr(dt tensor.DType, got float32, want float64) float64 {
	return ulpErrAt(dt, got, want, want)
}

// ulpErrAt is |got-want| in units of the spacing of dt at magnitude scale:
// for a sum, the sum of magnitudes bounds every rounding made on the way.
func ulpErrAt(dt tensor.DType, got float32, want, scale float64) float64 {
	if math.IsNaN(want) {
		if got != got {
			return 0
		}
		return math.Inf(1)
	}
	if math.IsInf(want, 0) || float64(got) == want {
		if float64(got) == want {
			return 0
		}
		return math.Inf(1)
	}
	mant := map[tensor.DType]int{tensor.Float32: 23, tensor.Float16: 10, tensor.BFloat16: 7}[dt]
	minExp := map[tensor.DType]int{tensor.Float32: -126, tensor.Float16: -14, tensor.BFloat16: -126}[dt]
	_, e := math.Frexp(scale)
	e = max(e-1, minExp)
	return math.Abs(float64(got)-want) / math.Ldexp(1, e-mant)
}

func stVals(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 42))
	v := make([]float32, n)
	for i := range v {
		// a wide spread of magnitudes, kept inside float16's finite range
		x := r.NormFloat64() * math.Exp(r.NormFloat64()*2)
		v[i] = float32(math.Max(-6e4, math.Min(6e4, x)))
	}
	return v
}

func stTensor(dt tensor.DType, vals []float32) (*tensor.Tensor, error) {
	x, err := tensor.Empty(dt, len(vals))
	if err != nil {
		return nil, err
	}
	switch dt {
	case tensor.Float32:
		f, _ := x.Float32s()
		copy(f, vals)
	default:
		u, _ := x.Uint16s()
		for i, v := range vals {
			if dt == tensor.Float16 {
				u[i] = tensor.Float32ToFloat16(v)
			} else {
				u[i] = tensor.Float32ToBFloat16(v)
			}
		}
	}
	return x, nil
}

// stAlloc holds a case's set-up tensors and the first allocation error, so
// a failed allocation is the case's FAIL with its cause, not a nil tensor.
type stAlloc struct {
	ts  []*tensor.Tensor
	err error
}

// empty is tensor.Empty(dt, n), nil once an allocation has failed.
func (a *stAlloc) empty(dt tensor.DType, n int) *tensor.Tensor {
	if a.err != nil {
		return nil
	}
	t, err := tensor.Empty(dt, n)
	a.keep(t, err)
	return t
}

// vals is stTensor(dt, v), nil once an allocation has failed.
func (a *stAlloc) vals(dt tensor.DType, v []float32) *tensor.Tensor {
	if a.err != nil {
		return nil
	}
	t, err := stTensor(dt, v)
	a.keep(t, err)
	return t
}

func (a *stAlloc) keep(t *tensor.Tensor, err error) {
	if err != nil {
		a.err = fmt.Errorf("set-up: %w", err)
		return
	}
	a.ts = append(a.ts, t)
}

// free frees every tensor a made.
func (a *stAlloc) free() {
	for _, t := range a.ts {
		t.Free()
	}
}

func stRead(x *tensor.Tensor) []float32 {
	if x.DType() == tensor.Float32 {
		f, _ := x.Float32s()
		return f
	}
	u, _ := x.Uint16s()
	out := make([]float32, len(u))
	for i, v := range u {
		if x.DType() == tensor.Float16 {
			out[i] = tensor.Float16ToFloat32(v)
		} else {
			out[i] = tensor.BFloat16ToFloat32(v)
		}
	}
	return out
}

// timed runs f once to warm up, then times it in 15 rounds of at least 2
// ms each and returns the best round's GB/s for bytes per call. One call of
// a megabyte kernel takes tens of microseconds, and for ~20 ms after each
// garbage collection (the reference computations make plenty) the Go
// runtime's background work holds the second CPU: the pool's thread then
// starts ~1 ms late on every call. Timed alone, calls swung 30x from run
// to run; the best of 30 ms is the kernel's own rate. No collection starts
// while it times (unless a GOMEMLIMIT forces one).
func timed(bytes int, f func() error) (float64, error) {
	if err := f(); err != nil {
		return 0, err
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	const rounds, least = 15, 2 * time.Millisecond
	best := 0.0
	for r := 0; r < rounds; r++ {
		calls, t0, el := 0, time.Now(), time.Duration(0)
		for ; el < least; el = time.Since(t0) {
			if err := f(); err != nil {
				return 0, err
			}
			calls++
		}
		best = max(best, float64(bytes)*float64(calls)/el.Seconds()/1e9)
	}
	return best, nil
}

func stCastDown(b *backend.CPU, dt tensor.DType, n int) stResult {
	vals := stVals(1, n)
	var a stAlloc
	defer a.free()
	src, dst := a.vals(tensor.Float32, vals), a.empty(dt, n)
	if a.err != nil {
		return stResult{err: a.err}
	}
	gb, err := timed(n*6, func() error { return b.Cast([]*tensor.Tensor{dst}, []*tensor.Tensor{src}) })
	if err != nil {
		return stResult{err: err}
	}
	u, _ := dst.Uint16s()
	worst := 0.0
	for i, v := range vals {
		want := tensor.Float32ToFloat16(v)
		if dt == tensor.BFloat16 {
			want = tensor.Float32ToBFloat16(v)
		}
		if u[i] != want {
			worst = math.Inf(1)
		}
	}
	return stResult{ulps: worst, gbps: gb}
}

func stCastUp(b *backend.CPU, dt tensor.DType, n int) stResult {
	var a stAlloc
	defer a.free()
	src, dst := a.vals(dt, stVals(2, n)), a.empty(tensor.Float32, n)
	if a.err != nil {
		return stResult{err: a.err}
	}
	gb, err := timed(n*6, func() error { return b.Cast([]*tensor.Tensor{dst}, []*tensor.Tensor{src}) })
	if err != nil {
		return stResult{err: err}
	}
	u, _ := src.Uint16s()
	f, _ := dst.Float32s()
	worst := 0.0
	for i, h := range u {
		want := tensor.Float16ToFloat32(h)
		if dt == tensor.BFloat16 {
			want = tensor.BFloat16ToFloat32(h)
		}
		if math.Float32bits(f[i]) != math.Float32bits(want) {
			worst = math.Inf(1)
		}
	}
	return stResult{ulps: worst, gbps: gb}
}

func stScale(b *backend.CPU, dt tensor.DType, n int) stResult {
	var al stAlloc
	defer al.free()
	x := al.vals(dt, stVals(3, n))
	if al.err != nil {
		return stResult{err: al.err}
	}
	in := append([]float32(nil), stRead(x)...)
	const a = 0.7071
	if err := b.Scale([]*tensor.Tensor{x}, a); err != nil {
		return stResult{err: err}
	}
	worst := 0.0
	for i, g := range stRead(x) {
		worst = max(worst, ulpErr(dt, g, float64(in[i])*float64(float32(a))))
	}
	gb, err := timed(n*dt.Size()*2, func() error { return b.Scale([]*tensor.Tensor{x}, 1) })
	return stResult{ulps: worst, gbps: gb, err: err}
}

func stAxpy(b *backend.CPU, dt tensor.DType, n int) stResult {
	var al stAlloc
	defer al.free()
	x, y := al.vals(dt, stVals(4, n)), al.vals(dt, stVals(5, n))
	if al.err != nil {
		return stResult{err: al.err}
	}
	xv, yv := append([]float32(nil), stRead(x)...), append([]float32(nil), stRead(y)...)
	const a = -0.25
	if err := b.Axpy(a, []*tensor.Tensor{x}, []*tensor.Tensor{y}); err != nil {
		return stResult{err: err}
	}
	worst := 0.0
	for i, g := range stRead(y) {
		worst = max(worst, ulpErr(dt, g, float64(yv[i])+a*float64(xv[i])))
	}
	gb, err := timed(n*dt.Size()*3, func() error { return b.Axpy(0, []*tensor.Tensor{x}, []*tensor.Tensor{y}) })
	return stResult{ulps: worst, gbps: gb, err: err}
}

func stSumsq(b *backend.CPU, dt tensor.DType, n int) stResult {
	var a stAlloc
	defer a.free()
	x := a.vals(dt, stVals(6, n))
	if a.err != nil {
		return stResult{err: a.err}
	}
	want := exactSumSquares(stRead(x))
	var got float64
	gb, err := timed(n*dt.Size(), func() (e error) { got, e = b.SumSquares([]*tensor.Tensor{x}, nil); return })
	if err == nil {
		err = relCheck(got, want, 1e-12)
	}
	// float64 accumulation: the error is reported relative to the total, not in ulps
	return stResult{ulps: math.Abs(got-want) / want, gbps: gb, err: err}
}

// exactSumSquares is the sum of the squares of v rounded once to float64.
// Each square of a float32 is exact in float64, and a big.Float as wide as
// float64's whole exponent range adds them without rounding. A float64 sum
// in index order rounds a million times and drifts ~1e-12 from the truth on
// the case's values, more than the blocked kernels it would judge.
func exactSumSquares(v []float32) float64 {
	sum := new(big.Float).SetPrec(2200)
	var sq big.Float
	for _, x := range v {
		sum.Add(sum, sq.SetFloat64(float64(x)*float64(x)))
	}
	f, _ := sum.Float64()
	return f
}

func relCheck(got, want, tol float64) error {
	if math.Abs(got-want) > tol*math.Abs(want) {
		return fmt.Errorf("got %v want %v", got, want)
	}
	return nil
}

func stNonFinite(b *backend.CPU, dt tensor.DType, n int) stResult {
	vals := stVals(7, n)
	var a stAlloc
	defer a.free()
	x := a.vals(dt, vals)
	if a.err != nil {
		return stResult{err: a.err}
	}
	var found bool
	gb, err := timed(n*dt.Size(), func() (e error) { found, e = b.NonFinite([]*tensor.Tensor{x}); return })
	if err != nil || found {
		return stResult{ulps: math.Inf(1), err: err}
	}
	vals[n-1] = float32(math.NaN())
	y := a.vals(dt, vals)
	if a.err != nil {
		return stResult{err: a.err}
	}
	if found, err = b.NonFinite([]*tensor.Tensor{y}); err != nil || !found {
		return stResult{ulps: math.Inf(1), err: err}
	}
	return stResult{gbps: gb}
}

func stPack(b *backend.CPU, dt tensor.DType, n int) stResult {
	var al stAlloc
	defer al.free()
	x, flat, out := al.vals(dt, stVals(8, n)), al.empty(dt, n+64), al.empty(dt, n)
	if al.err != nil {
		return stResult{err: al.err}
	}
	parts := func(t *tensor.Tensor) []*tensor.Tensor {
		a, _ := t.Slice(0, n/3)
		c, _ := t.Slice(n/3, n-n/3)
		return []*tensor.Tensor{a, c}
	}
	offs := []int{5, 5 + n/3 + 17}
	gb, err := timed(n*dt.Size()*2, func() error { return b.Pack(flat, offs, parts(x)) })
	if err == nil {
		err = b.Unpack(parts(out), flat, offs)
	}
	worst := 0.0
	xr, or := stRead(x), stRead(out)
	for i := range xr {
		if math.Float32bits(xr[i]) != math.Float32bits(or[i]) {
			worst = math.Inf(1)
		}
	}
	return stResult{ulps: worst, gbps: gb, err: err}
}

func stReduce(b *backend.CPU, dt tensor.DType, n int) stResult {
	var srcs []*tensor.Tensor
	var vals [][]float32
	var a stAlloc
	defer a.free()
	for j := 0; j < 4; j++ {
		x := a.vals(dt, stVals(uint64(10+j), n))
		if a.err != nil {
			return stResult{err: a.err}
		}
		srcs, vals = append(srcs, x), append(vals, append([]float32(nil), stRead(x)...))
	}
	dst := a.empty(dt, n)
	if a.err != nil {
		return stResult{err: a.err}
	}
	gb, err := timed(n*dt.Size()*5, func() error { return b.Reduce(backend.Sum, dst, srcs) })
	worst := 0.0
	for i, g := range stRead(dst) {
		want, scale := 0.0, 0.0
		for j := range vals {
			want += float64(vals[j][i])
			scale += math.Abs(float64(vals[j][i]))
		}
		worst = max(worst, ulpErrAt(dt, g, want, scale))
	}
	return stResult{ulps: worst, gbps: gb, err: err}
}

// hugePagesReport prints whether host buffers ask for transparent huge
// pages and what the kernel's THP mode makes of that.
func hugePagesReport(w io.Writer) error {
	on, err := csrc.HugePages()
	if err != nil {
		return err
	}
	mode := "unknown (no /sys/kernel/mm/transparent_hugepage/enabled)"
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err == nil {
		mode = strings.TrimSpace(string(b))
	}
	state := "asked for on buffers of 2 MiB and more (" + csrc.HugePagesEnv + "=0 turns it off)"
	if !on {
		state = "off (" + csrc.HugePagesEnv + "=0)"
	}
	_, err = fmt.Fprintf(w, "huge pages: %s; kernel THP: %s\n", state, mode)
	return err
}
