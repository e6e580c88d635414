package backend

import (
	"context"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
)

// CPU is the Backend over the C core: SIMD kernels (AVX-512, AVX2 or scalar,
// chosen at run time) on the context's thread pool. Safe for concurrent use.
//
// A view made by On runs the same kernels for a device whose memory the
// host can address but Go code may not read (package sim): its arguments
// are checked against that device, synchronously, and only the C call is
// handed to an Executor.
type CPU struct {
	ctx  *csrc.Ctx
	dev  tensor.Device // tensor.CPU unless a view
	run  Executor      // nil: call at once
	view bool          // shares another CPU's pool: Close leaves it alone
}

// Executor runs the C call of one kernel of a view (see On). op names the
// kernel, for an error raised after the call returned. When wait is false
// the Executor may queue kernel and return at once; when it is true (a
// kernel returning a value, a copy into host memory) it must return only
// once kernel has run, with its error.
type Executor func(op string, wait bool, kernel func() error) error

var _ Backend = (*CPU)(nil)

// SpinEnv names the environment variable that sets how long a CPU
// backend's pool threads spin waiting for the next kernel before they sleep:
// a Go duration from 0 to 1s, such as "0" for a pool sharing its cores with
// other busy threads. Unset, the pool spins 500us after a kernel that came
// soon after the one before (a training loop; sleeping there cost a two-thread
// GPT step 5-7%), 5us otherwise.
const SpinEnv = "DEEPGO_POOL_SPIN"

// NewCPU makes a CPU backend with threads workers (<= 0: one per CPU).
func NewCPU(threads int) (*CPU, error) {
	spin, set, err := spinFromEnv()
	if err != nil {
		return nil, fmt.Errorf("backend.NewCPU(%d threads): %w", threads, err)
	}
	if _, err := csrc.HugePages(); err != nil { // else the first allocation fails with it
		return nil, fmt.Errorf("backend.NewCPU(%d threads): %w", threads, err)
	}
	if b := csrc.BLAS(); b.Error != "" {
		return nil, fmt.Errorf("backend.NewCPU(%d threads): %s", threads, b.Error)
	}
	c, err := csrc.NewCtx(threads)
	if err != nil {
		return nil, fmt.Errorf("backend.NewCPU(%d threads): %w", threads, err)
	}
	if set {
		if err := c.SetSpin(spin); err != nil {
			c.Close()
			return nil, fmt.Errorf("backend.NewCPU(%d threads): %s: %w", threads, SpinEnv, err)
		}
	}
	return &CPU{ctx: c}, nil
}

// spinFromEnv reads SpinEnv; set is false when it is unset or empty.
func spinFromEnv() (d time.Duration, set bool, err error) {
	v := os.Getenv(SpinEnv)
	if v == "" {
		return 0, false, nil
	}
	if d, err = time.ParseDuration(v); err != nil || d < 0 || d > time.Second {
		return 0, false, fmt.Errorf("%s=%q: want a Go duration from 0 to 1s, such as \"200us\"", SpinEnv, v)
	}
	return d, true, nil
}

// On returns a view of b that checks its arguments against dev instead of
// the host and runs each kernel's C call through run. The view shares b's
// thread pool: closing the view does nothing, closing b ends both.
func (b *CPU) On(dev tensor.Device, run Executor) *CPU {
	return &CPU{ctx: b.ctx, dev: dev, run: run, view: true}
}

// Exec runs kernel as b runs its own C calls: at once on the host, through
// the Executor on a view. Packages with C kernels of their own (optim) use
// it to stay in the view's order.
func (b *CPU) Exec(op string, wait bool, kernel func() error) error {
	if b.run == nil {
		return kernel()
	}
	return b.run(op, wait, kernel)
}

// Ctx exposes the C context for packages that call C kernels of their own
// (optimizers, collectives) on the same pool.
func (b *CPU) Ctx() *csrc.Ctx { return b.ctx }

// Threads reports the pool size.
func (b *CPU) Threads() int { return b.ctx.Threads() }

// SetThreads resizes the pool; no call may be in flight.
func (b *CPU) SetThreads(n int) error { return b.ctx.SetThreads(n) }

// ISA reports the instruction set in use.
func (b *CPU) ISA() csrc.ISA { return b.ctx.ISA() }

// SetISA forces an instruction set (tests and benchmarks compare them).
func (b *CPU) SetISA(i csrc.ISA) error { return b.ctx.SetISA(i) }

// Name describes the backend.
func (b *CPU) Name() string { return fmt.Sprintf("cpu(%v, %d threads)", b.ctx.ISA(), b.ctx.Threads()) }

// Device is the host, or the device of a view.
func (b *CPU) Device() tensor.Device { return b.dev }

// Empty allocates a zeroed host tensor. A view on another device has no
// allocator of its own: its device's backend allocates.
func (b *CPU) Empty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	if !b.dev.IsCPU() {
		return nil, fmt.Errorf("backend.CPU.Empty: %w: a view on %v allocates through its device's backend", ErrUnsupported, b.dev)
	}
	return tensor.Empty(dt, shape...)
}

func dt(d tensor.DType) csrc.DType { return csrc.DType(d) }

// Cast converts srcs[i] into dsts[i]. All srcs share one dtype and all dsts
// share one dtype.
func (b *CPU) Cast(dsts, srcs []*tensor.Tensor) error {
	const op = "Cast"
	if err := CheckSameLens(op, "srcs", "dsts", len(srcs), len(dsts)); err != nil {
		return err
	}
	st, dtt := FirstDType(srcs), FirstDType(dsts)
	sp, sn, err := CheckList(op, "srcs", srcs, b.dev, st)
	if err != nil {
		return err
	}
	dp, dn, err := CheckList(op, "dsts", dsts, b.dev, dtt)
	if err != nil {
		return err
	}
	if len(srcs) > 0 {
		if err := CheckFloatDType(op, "srcs[0]", st); err != nil {
			return err
		}
		if err := CheckFloatDType(op, "dsts[0]", dtt); err != nil {
			return err
		}
	}
	if err := CheckSameCounts(op, "dsts", sn, dn); err != nil {
		return err
	}
	return b.Exec(op, false, func() error { return b.ctx.Cast(dt(st), dt(dtt), sp, dp, sn) })
}

// Scale multiplies xs[i] by alpha in place.
func (b *CPU) Scale(xs []*tensor.Tensor, alpha float32) error {
	const op = "Scale"
	t := FirstDType(xs)
	p, n, err := CheckList(op, "xs", xs, b.dev, t)
	if err != nil {
		return err
	}
	if len(xs) > 0 {
		if err := CheckFloatDType(op, "xs[0]", t); err != nil {
			return err
		}
	}
	return b.Exec(op, false, func() error { return b.ctx.Scale(dt(t), p, n, alpha) })
}

// Axpy does ys[i] += alpha*xs[i]. The xs share one floating dtype and the
// ys share one, not necessarily the same: each y is computed in float32 and
// rounded to its dtype once (a float32 gradient into a bfloat16 one).
func (b *CPU) Axpy(alpha float32, xs, ys []*tensor.Tensor) error {
	const op = "Axpy"
	if err := CheckSameLens(op, "xs", "ys", len(xs), len(ys)); err != nil {
		return err
	}
	xt, xp, xn, err := CheckFloatList(op, "xs", xs, b.dev)
	if err != nil {
		return err
	}
	yt, yp, yn, err := CheckFloatList(op, "ys", ys, b.dev)
	if err != nil {
		return err
	}
	if err := CheckSameCounts(op, "ys", xn, yn); err != nil {
		return err
	}
	return b.Exec(op, false, func() error { return b.ctx.AxpyMixed(dt(xt), dt(yt), alpha, xp, yp, xn) })
}

// SumSquares returns the float64 sum of squares over all xs.
func (b *CPU) SumSquares(xs []*tensor.Tensor, per []float64) (float64, error) {
	const op = "SumSquares"
	if per != nil {
		if err := CheckSameLens(op, "xs", "per", len(xs), len(per)); err != nil {
			return 0, err
		}
	}
	t := FirstDType(xs)
	p, n, err := CheckList(op, "xs", xs, b.dev, t)
	if err != nil {
		return 0, err
	}
	if len(xs) > 0 {
		if err := CheckFloatDType(op, "xs[0]", t); err != nil {
			return 0, err
		}
	}
	var sum float64
	err = b.Exec(op, true, func() (err error) {
		sum, err = b.ctx.SumSquares(dt(t), p, n, per)
		return err
	})
	return sum, err
}

// NonFinite reports whether any element of xs is Inf or NaN.
func (b *CPU) NonFinite(xs []*tensor.Tensor) (bool, error) {
	const op = "NonFinite"
	t := FirstDType(xs)
	p, n, err := CheckList(op, "xs", xs, b.dev, t)
	if err != nil {
		return false, err
	}
	if len(xs) > 0 {
		if err := CheckFloatDType(op, "xs[0]", t); err != nil {
			return false, err
		}
	}
	var found bool
	err = b.Exec(op, true, func() (err error) {
		found, err = b.ctx.NonFinite(dt(t), p, n)
		return err
	})
	return found, err
}

// Pack copies srcs[i] into flat at offs[i].
func (b *CPU) Pack(flat *tensor.Tensor, offs []int, srcs []*tensor.Tensor) error {
	p, n, o, err := CheckPack("Pack", "srcs", flat, offs, srcs, b.dev)
	if err != nil {
		return err
	}
	fp, fn := flat.Ptr(), int64(flat.Numel())
	return b.Exec("Pack", false, func() error { return b.ctx.Pack(dt(flat.DType()), p, n, o, fp, fn) })
}

// Unpack copies flat at offs[i] into dsts[i].
func (b *CPU) Unpack(dsts []*tensor.Tensor, flat *tensor.Tensor, offs []int) error {
	p, n, o, err := CheckPack("Unpack", "dsts", flat, offs, dsts, b.dev)
	if err != nil {
		return err
	}
	fp, fn := flat.Ptr(), int64(flat.Numel())
	return b.Exec("Unpack", false, func() error { return b.ctx.Unpack(dt(flat.DType()), fp, fn, o, n, p) })
}

// Reduce sets dst = srcs[0] op srcs[1] op ... in list order.
func (b *CPU) Reduce(op ReduceOp, dst *tensor.Tensor, srcs []*tensor.Tensor) error {
	const name = "Reduce"
	if err := CheckTensor(name, "dst", dst, b.dev); err != nil {
		return err
	}
	if len(srcs) == 0 {
		return ArgErr(name, "srcs", "is empty: need at least one source")
	}
	p, n, err := CheckListLike(name, "srcs", srcs, b.dev, dst.DType(), "dst")
	if err != nil {
		return err
	}
	for i := range n {
		if n[i] != int64(dst.Numel()) {
			return ArgErr(name, fmt.Sprintf("srcs[%d]", i), "has %d elements, dst has %d", n[i], dst.Numel())
		}
	}
	switch dst.DType() {
	case tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Int32, tensor.Int64:
	default:
		return ArgErr(name, "dst", "dtype %v: allowed float32, float16, bfloat16, int32, int64", dst.DType())
	}
	var cop csrc.ReduceOp
	switch op {
	case Sum:
		cop = csrc.Sum
	case Max:
		cop = csrc.Max
	case Min:
		cop = csrc.Min
	default:
		return ArgErr(name, "op", "%v: allowed sum, max, min", op)
	}
	dp, dn := dst.Ptr(), int64(dst.Numel())
	return b.Exec(name, false, func() error { return b.ctx.ReduceInto(dt(dst.DType()), cop, p, dp, dn) })
}

// Copy copies src into dst, each in host memory or on Device(). On a view,
// a copy from host memory is staged, so that src may be reused at once,
// and a copy into host memory waits for its data.
func (b *CPU) Copy(dst, src *tensor.Tensor) error {
	const op = "Copy"
	dstHost, srcHost, err := CheckCopy(op, dst, src, b.dev)
	if err != nil {
		return err
	}
	d, s := bytesOf(dst), bytesOf(src)
	switch {
	case b.run == nil || dstHost && srcHost:
		copy(d, s)
		return nil
	case dstHost:
		return b.Exec(op, true, func() error { copy(d, s); return nil })
	case srcHost && len(s) > 0:
		p, err := csrc.Alloc(len(s), tensor.HostAlign)
		if err != nil {
			return fmt.Errorf("backend.Copy: staging %d bytes: %w", len(s), err)
		}
		stage := unsafe.Slice((*byte)(p), len(s))
		copy(stage, s)
		err = b.Exec(op, false, func() error { copy(d, stage); csrc.Free(p); return nil })
		if err != nil {
			csrc.Free(p)
		}
		return err
	}
	return b.Exec(op, false, func() error { copy(d, s); return nil })
}

// bytesOf is the memory of a checked (live, contiguous) tensor on the host
// or on a view's device, whose memory the host addresses.
func bytesOf(t *tensor.Tensor) []byte {
	if t.Bytes() == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(t.Ptr()), t.Bytes())
}

// Zero clears every byte of each xs[i].
func (b *CPU) Zero(xs []*tensor.Tensor) error {
	const op = "Zero"
	ps, ns := make([]unsafe.Pointer, len(xs)), make([]int64, len(xs))
	for i, x := range xs {
		if err := CheckTensor(op, "xs", x, b.dev); err != nil {
			// the index only when there is an error: Zero runs per gradient
			// scratch and bucket, and formatting it each time shows
			return CheckTensor(op, fmt.Sprintf("xs[%d]", i), x, b.dev)
		}
		ps[i], ns[i] = x.Ptr(), int64(x.Bytes())
	}
	return b.Exec(op, false, func() error { return b.ctx.Zero(ps, ns) })
}

// Synchronize returns at once: CPU calls complete before returning. A
// view's device synchronizes itself (package sim).
func (b *CPU) Synchronize(ctx context.Context) error { return ctx.Err() }

// Close stops the thread pool; a view's Close does nothing.
func (b *CPU) Close() error {
	if !b.view {
		b.ctx.Close()
	}
	return nil
}

var _ MemoryStats = (*CPU)(nil)

// Allocated is HostStats' (on a view of another device, too: its device's
// backend has that device's).
func (b *CPU) Allocated() int64 { return tensor.HostMemory().Bytes() }

// PeakAllocated is HostStats'.
func (b *CPU) PeakAllocated() int64 { return tensor.HostMemory().Peak() }

// Reserved is Allocated: the C allocator keeps nothing for reuse.
func (b *CPU) Reserved() int64 { return b.Allocated() }

// PeakReserved is PeakAllocated.
func (b *CPU) PeakReserved() int64 { return b.PeakAllocated() }

// ResetPeak resets HostStats' peak.
func (b *CPU) ResetPeak() { tensor.HostMemory().ResetPeak() }
