// Package backend defines the compute Backend: the few multi-tensor kernels
// every layer above (optimizers, ZeRO, collectives) needs, on one device. The
// CPU backend runs them on the C core; the CUDA backend (package cuda, build
// tag cuda) runs the same kernels on a stream, sharing their element math.
package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/tensor"
)

// ErrUnsupported marks an operation or dtype a backend does not provide.
var ErrUnsupported = errors.New("not supported")

// ReduceOp selects the combining operator of Reduce.
type ReduceOp int

// Reduction operators.
const (
	Sum ReduceOp = iota
	Max
	Min
)

func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("ReduceOp(%d)", int(o))
}

// Backend runs multi-tensor kernels on one device. Every method takes whole
// lists so that one call does a bucket or a shard of work.
//
// Contract for every method: tensors must be contiguous, live on Device(),
// and not be freed during the call; lists that go together must have equal
// lengths and per-index equal element counts. A violation returns an
// *ArgError naming the argument and nothing is written. Kernels are
// stream-ordered on devices that have streams: they may return before the
// work is done, and Synchronize waits for it. On the CPU every call is
// complete when it returns.
type Backend interface {
	// Name identifies the backend, e.g. "cpu(avx512, 2 threads)".
	Name() string
	// Device is where this backend's tensors live.
	Device() tensor.Device
	// Empty allocates a zeroed tensor on Device().
	Empty(dt tensor.DType, shape ...int) (*tensor.Tensor, error)
	// Cast converts each srcs[i] into dsts[i] (float32, float16, bfloat16 in
	// any direction), rounding to nearest even.
	Cast(dsts, srcs []*tensor.Tensor) error
	// Scale multiplies each xs[i] in place by alpha.
	Scale(xs []*tensor.Tensor, alpha float32) error
	// Axpy does ys[i] += alpha * xs[i]. The xs share one floating dtype and
	// the ys share one; the CPU backend allows the two to differ (each y is
	// computed in float32 and rounded once), a backend that requires them
	// equal (CUDA) returns an *ArgError naming ys[i].
	Axpy(alpha float32, xs, ys []*tensor.Tensor) error
	// SumSquares returns the sum of squares of every element of every tensor,
	// accumulated in float64; when per is non-nil it must have len(xs) entries
	// and receives each tensor's own sum.
	SumSquares(xs []*tensor.Tensor, per []float64) (float64, error)
	// NonFinite reports whether any element is Inf or NaN.
	NonFinite(xs []*tensor.Tensor) (bool, error)
	// Pack copies srcs[i] into flat starting at element offs[i].
	Pack(flat *tensor.Tensor, offs []int, srcs []*tensor.Tensor) error
	// Unpack copies flat from element offs[i] into dsts[i].
	Unpack(dsts []*tensor.Tensor, flat *tensor.Tensor, offs []int) error
	// Reduce sets dst = srcs[0] op srcs[1] op ... elementwise, combining in
	// list order in float32 (halves widened, rounded once), so the result
	// bits depend only on the list order. dst may be one of srcs.
	Reduce(op ReduceOp, dst *tensor.Tensor, srcs []*tensor.Tensor) error
	// Copy copies src into dst: the same dtype and element count, both
	// contiguous, each in host memory or on Device(). It is ordered after
	// the work issued on this backend before it. When dst is in host memory
	// Copy returns once the data is there; when src is, src may be reused
	// as soon as Copy returns. It is the one way data crosses between the
	// host and a device.
	Copy(dst, src *tensor.Tensor) error
	// Zero clears every byte of each xs[i] (any dtype). Scale by 0 is not a
	// substitute: it keeps NaN and turns Inf into NaN.
	Zero(xs []*tensor.Tensor) error
	// Synchronize waits until all work issued on this backend is done.
	Synchronize(ctx context.Context) error
	// Close releases the backend's resources (threads, streams).
	Close() error
}

// ArgError is a bad argument to a Backend method.
type ArgError struct {
	Op  string // method, e.g. "Cast"
	Arg string // argument, e.g. "dsts[2]"
	Msg string // what is wrong and what is allowed
}

func (e *ArgError) Error() string { return fmt.Sprintf("backend.%s: %s: %s", e.Op, e.Arg, e.Msg) }
