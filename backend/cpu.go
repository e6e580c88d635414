package backend

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/tensor"
)

// CPU is the Backend over the C core: SIMD kernels (AVX-512, AVX2 or scalar,
// chosen at run time) on the context's thread pool. Safe for concurrent use.
type CPU struct {
	ctx *csrc.Ctx
}

var _ Backend = (*CPU)(nil)

// NewCPU makes a CPU backend with threads workers (<= 0: one per CPU).
func NewCPU(threads int) (*CPU, error) {
	c, err := csrc.NewCtx(threads)
	if err != nil {
		return nil, fmt.Errorf("backend.NewCPU(%d threads): %w", threads, err)
	}
	return &CPU{ctx: c}, nil
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

// Device is the host.
func (b *CPU) Device() tensor.Device { return tensor.CPU }

// Empty allocates a zeroed host tensor.
func (b *CPU) Empty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
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
	sp, sn, err := CheckList(op, "srcs", srcs, tensor.CPU, st)
	if err != nil {
		return err
	}
	dp, dn, err := CheckList(op, "dsts", dsts, tensor.CPU, dtt)
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
	return b.ctx.Cast(dt(st), dt(dtt), sp, dp, sn)
}

// Scale multiplies xs[i] by alpha in place.
func (b *CPU) Scale(xs []*tensor.Tensor, alpha float32) error {
	const op = "Scale"
	t := FirstDType(xs)
	p, n, err := CheckList(op, "xs", xs, tensor.CPU, t)
	if err != nil {
		return err
	}
	if len(xs) > 0 {
		if err := CheckFloatDType(op, "xs[0]", t); err != nil {
			return err
		}
	}
	return b.ctx.Scale(dt(t), p, n, alpha)
}

// Axpy does ys[i] += alpha*xs[i]. The xs share one floating dtype and the
// ys share one, not necessarily the same: each y is computed in float32 and
// rounded to its dtype once (a float32 gradient into a bfloat16 one).
func (b *CPU) Axpy(alpha float32, xs, ys []*tensor.Tensor) error {
	const op = "Axpy"
	if err := CheckSameLens(op, "xs", "ys", len(xs), len(ys)); err != nil {
		return err
	}
	xt, xp, xn, err := CheckFloatList(op, "xs", xs, tensor.CPU)
	if err != nil {
		return err
	}
	yt, yp, yn, err := CheckFloatList(op, "ys", ys, tensor.CPU)
	if err != nil {
		return err
	}
	if err := CheckSameCounts(op, "ys", xn, yn); err != nil {
		return err
	}
	return b.ctx.AxpyMixed(dt(xt), dt(yt), alpha, xp, yp, xn)
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
	p, n, err := CheckList(op, "xs", xs, tensor.CPU, t)
	if err != nil {
		return 0, err
	}
	if len(xs) > 0 {
		if err := CheckFloatDType(op, "xs[0]", t); err != nil {
			return 0, err
		}
	}
	return b.ctx.SumSquares(dt(t), p, n, per)
}

// NonFinite reports whether any element of xs is Inf or NaN.
func (b *CPU) NonFinite(xs []*tensor.Tensor) (bool, error) {
	const op = "NonFinite"
	t := FirstDType(xs)
	p, n, err := CheckList(op, "xs", xs, tensor.CPU, t)
	if err != nil {
		return false, err
	}
	if len(xs) > 0 {
		if err := CheckFloatDType(op, "xs[0]", t); err != nil {
			return false, err
		}
	}
	return b.ctx.NonFinite(dt(t), p, n)
}

// Pack copies srcs[i] into flat at offs[i].
func (b *CPU) Pack(flat *tensor.Tensor, offs []int, srcs []*tensor.Tensor) error {
	p, n, o, err := CheckPack("Pack", "srcs", flat, offs, srcs, tensor.CPU)
	if err != nil {
		return err
	}
	return b.ctx.Pack(dt(flat.DType()), p, n, o, flat.Ptr(), int64(flat.Numel()))
}

// Unpack copies flat at offs[i] into dsts[i].
func (b *CPU) Unpack(dsts []*tensor.Tensor, flat *tensor.Tensor, offs []int) error {
	p, n, o, err := CheckPack("Unpack", "dsts", flat, offs, dsts, tensor.CPU)
	if err != nil {
		return err
	}
	return b.ctx.Unpack(dt(flat.DType()), flat.Ptr(), int64(flat.Numel()), o, n, p)
}

// Reduce sets dst = srcs[0] op srcs[1] op ... in list order.
func (b *CPU) Reduce(op ReduceOp, dst *tensor.Tensor, srcs []*tensor.Tensor) error {
	const name = "Reduce"
	if err := CheckTensor(name, "dst", dst, tensor.CPU); err != nil {
		return err
	}
	if len(srcs) == 0 {
		return ArgErr(name, "srcs", "is empty: need at least one source")
	}
	p, n, err := CheckListLike(name, "srcs", srcs, tensor.CPU, dst.DType(), "dst")
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
	return b.ctx.ReduceInto(dt(dst.DType()), cop, p, dst.Ptr(), int64(dst.Numel()))
}

// Copy copies host src into host dst.
func (b *CPU) Copy(dst, src *tensor.Tensor) error {
	if _, _, err := CheckCopy("Copy", dst, src, tensor.CPU); err != nil {
		return err
	}
	d, _ := dst.RawBytes()
	s, _ := src.RawBytes()
	copy(d, s)
	return nil
}

// Zero clears every byte of each host xs[i].
func (b *CPU) Zero(xs []*tensor.Tensor) error {
	for i, x := range xs {
		if err := CheckTensor("Zero", fmt.Sprintf("xs[%d]", i), x, tensor.CPU); err != nil {
			return err
		}
	}
	for _, x := range xs {
		r, _ := x.RawBytes()
		clear(r)
	}
	return nil
}

// Synchronize returns at once: CPU calls complete before returning.
func (b *CPU) Synchronize(ctx context.Context) error { return ctx.Err() }

// Close stops the thread pool.
func (b *CPU) Close() error {
	b.ctx.Close()
	return nil
}
