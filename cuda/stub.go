//go:build !cuda

package cuda

import (
	"context"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// This file gives builds without the cuda tag the same API, every call
// failing with ErrNoCUDA (the go-sqlite3 static_mock pattern).

// DeviceCount reports the number of CUDA devices.
func DeviceCount() (int, error) { return 0, ErrNoCUDA }

// Available reports whether a CUDA device can be used.
func Available() bool { return false }

// RuntimeVersion is the CUDA runtime version (1000*major + 10*minor).
func RuntimeVersion() int { return 0 }

// DriverVersion is the CUDA version the driver supports, 0 without one.
func DriverVersion() int { return 0 }

// Malloc allocates a zeroed tensor on device dev.
func Malloc(dev int, dt tensor.DType, shape ...int) (*tensor.Tensor, error) { return nil, ErrNoCUDA }

// CopyToDevice copies host tensor src into device tensor dst.
func CopyToDevice(dst, src *tensor.Tensor) error { return ErrNoCUDA }

// CopyToHost copies device tensor src into host tensor dst.
func CopyToHost(dst, src *tensor.Tensor) error { return ErrNoCUDA }

// Stream is a CUDA stream.
type Stream struct{}

// NewStream creates a stream on device dev.
func NewStream(dev int) (*Stream, error) { return nil, ErrNoCUDA }

// Synchronize waits for the stream's work, or for ctx.
func (s *Stream) Synchronize(ctx context.Context) error { return ErrNoCUDA }

// Close destroys the stream.
func (s *Stream) Close() error { return ErrNoCUDA }

// Event is a CUDA event with timing.
type Event struct{}

// NewEvent creates an event on device dev.
func NewEvent(dev int) (*Event, error) { return nil, ErrNoCUDA }

// Record records the event on s (nil: the legacy default stream).
func (e *Event) Record(s *Stream) error { return ErrNoCUDA }

// Synchronize waits for the event, or for ctx.
func (e *Event) Synchronize(ctx context.Context) error { return ErrNoCUDA }

// Elapsed is the time in milliseconds from start to e.
func (e *Event) Elapsed(start *Event) (float32, error) { return 0, ErrNoCUDA }

// Close destroys the event.
func (e *Event) Close() error { return ErrNoCUDA }

// Backend runs the multi-tensor kernels on one CUDA device.
type Backend struct{}

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.NN         = (*Backend)(nil)
	_ optim.KernelSource = (*Backend)(nil)
	_ backend.HostStager = (*Backend)(nil)
	_ backend.Quantizer  = (*Backend)(nil)
)

// NewBackend makes a backend on device dev with its own stream.
func NewBackend(dev int) (*Backend, error) { return nil, ErrNoCUDA }

// Name identifies the backend.
func (b *Backend) Name() string { return "cuda(unavailable)" }

// Device is the backend's device.
func (b *Backend) Device() tensor.Device { return tensor.CUDA(0) }

// Stream is the stream the kernels run on.
func (b *Backend) Stream() *Stream { return nil }

// Empty allocates a zeroed device tensor.
func (b *Backend) Empty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) { return nil, ErrNoCUDA }

// HostEmpty allocates a zeroed tensor in page-locked host memory.
func (b *Backend) HostEmpty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	return nil, ErrNoCUDA
}

// CopyAsync starts a copy between host and device on the copy stream.
func (b *Backend) CopyAsync(dst, src *tensor.Tensor) (backend.Copying, error) {
	return nil, ErrNoCUDA
}

// Cast converts srcs[i] into dsts[i].
func (b *Backend) Cast(dsts, srcs []*tensor.Tensor) error { return ErrNoCUDA }

// QuantizeInt8 quantizes x to int8 in groups (backend.Quantizer).
func (b *Backend) QuantizeInt8(q, scales, x *tensor.Tensor) error { return ErrNoCUDA }

// DequantizeInt8 dequantizes q into y (backend.Quantizer).
func (b *Backend) DequantizeInt8(y, q, scales *tensor.Tensor) error { return ErrNoCUDA }

// Scale multiplies xs[i] by alpha in place.
func (b *Backend) Scale(xs []*tensor.Tensor, alpha float32) error { return ErrNoCUDA }

// Axpy does ys[i] += alpha*xs[i].
func (b *Backend) Axpy(alpha float32, xs, ys []*tensor.Tensor) error { return ErrNoCUDA }

// SumSquares returns the float64 sum of squares over all xs.
func (b *Backend) SumSquares(xs []*tensor.Tensor, per []float64) (float64, error) {
	return 0, ErrNoCUDA
}

// NonFinite reports whether any element of xs is Inf or NaN.
func (b *Backend) NonFinite(xs []*tensor.Tensor) (bool, error) { return false, ErrNoCUDA }

// Pack copies srcs[i] into flat at offs[i].
func (b *Backend) Pack(flat *tensor.Tensor, offs []int, srcs []*tensor.Tensor) error {
	return ErrNoCUDA
}

// Unpack copies flat at offs[i] into dsts[i].
func (b *Backend) Unpack(dsts []*tensor.Tensor, flat *tensor.Tensor, offs []int) error {
	return ErrNoCUDA
}

// Reduce sets dst = srcs[0] op srcs[1] op ... in list order.
func (b *Backend) Reduce(op backend.ReduceOp, dst *tensor.Tensor, srcs []*tensor.Tensor) error {
	return ErrNoCUDA
}

// Copy copies src into dst between the host and the device.
func (b *Backend) Copy(dst, src *tensor.Tensor) error { return ErrNoCUDA }

// Zero clears every byte of each xs[i].
func (b *Backend) Zero(xs []*tensor.Tensor) error { return ErrNoCUDA }

// OptimKernels runs optim's fused steps on this backend.
func (b *Backend) OptimKernels() (optim.Kernels, error) { return nil, ErrNoCUDA }

// LinearForward computes out = in @ w^T + b.
func (b *Backend) LinearForward(out, in, w, bias *tensor.Tensor) error { return ErrNoCUDA }

// LinearBackward accumulates din, dw and db.
func (b *Backend) LinearBackward(din, dw, db, dout, in, w *tensor.Tensor) error { return ErrNoCUDA }

// LayerNormForward normalises n rows of c channels.
func (b *Backend) LayerNormForward(out, mean, rstd, in, w, bias *tensor.Tensor, eps float32, n, c int) error {
	return ErrNoCUDA
}

// LayerNormBackward accumulates din, dw and db.
func (b *Backend) LayerNormBackward(din, dw, db, dout, in, w, mean, rstd *tensor.Tensor, n, c int) error {
	return ErrNoCUDA
}

// GELUForward computes out = GELU(in).
func (b *Backend) GELUForward(out, in *tensor.Tensor, n int) error { return ErrNoCUDA }

// GELUBackward accumulates din += GELU'(in) * dout.
func (b *Backend) GELUBackward(din, in, dout *tensor.Tensor, n int) error { return ErrNoCUDA }

// Add computes out = a + c.
func (b *Backend) Add(out, a, c *tensor.Tensor, n int) error { return ErrNoCUDA }

// EncoderForward computes out[b, t, :] = wte[tok[b, t]] + wpe[t].
func (b *Backend) EncoderForward(out, tok, wte, wpe *tensor.Tensor, nb, t, c, v int) error {
	return ErrNoCUDA
}

// EncoderBackward accumulates dwte[tok] += dout and dwpe[t] += dout.
func (b *Backend) EncoderBackward(dwte, dwpe, dout, tok *tensor.Tensor, nb, t, c, v int) error {
	return ErrNoCUDA
}

// AttentionForward runs causal attention, saving the weights in att.
func (b *Backend) AttentionForward(out, att, qkv *tensor.Tensor, nb, t, nh, hs, window int) error {
	return ErrNoCUDA
}

// AttentionBackward accumulates dqkv from dout and the saved att.
func (b *Backend) AttentionBackward(dqkv, dout, qkv, att *tensor.Tensor, nb, t, nh, hs, window int) error {
	return ErrNoCUDA
}

// SoftmaxXentForward writes probs and losses.
func (b *Backend) SoftmaxXentForward(probs, losses, logits, targets *tensor.Tensor, n, v int) error {
	return ErrNoCUDA
}

// SoftmaxXentBackward writes dlogits = (probs - onehot) * dlosses.
func (b *Backend) SoftmaxXentBackward(dlogits, probs, targets, dlosses *tensor.Tensor, n, v int) error {
	return ErrNoCUDA
}

// TransposeBlocks writes dst[j, i, :] = src[i, j, :].
func (b *Backend) TransposeBlocks(dst, src *tensor.Tensor, a, bs, w int) error { return ErrNoCUDA }

// VocabXentMax writes each row's largest logit (backend.VocabParallel).
func (b *Backend) VocabXentMax(maxes, logits *tensor.Tensor, n, v int) error { return ErrNoCUDA }

// VocabXentExp writes the weights, their sums and the target logits.
func (b *Backend) VocabXentExp(logits, sums, tlogits, maxes, targets *tensor.Tensor, n, v, lo, vocab int) error {
	return ErrNoCUDA
}

// VocabXentGrad turns the weights into the gradient.
func (b *Backend) VocabXentGrad(logits, sums, targets *tensor.Tensor, d float32, n, v, lo int) error {
	return ErrNoCUDA
}

// VocabClearRows zeroes the rows of tokens held elsewhere.
func (b *Backend) VocabClearRows(x, ids *tensor.Tensor, n, c, lo, v int) error { return ErrNoCUDA }

// Synchronize waits for the backend's work, or for ctx.
func (b *Backend) Synchronize(ctx context.Context) error { return ErrNoCUDA }

// Close releases the stream and scratch memory.
func (b *Backend) Close() error { return ErrNoCUDA }

// OptimKernels runs optim's fused steps on a Backend's device.
type OptimKernels struct{}

var _ optim.Kernels = (*OptimKernels)(nil)

// NewOptimKernels runs the steps on b.
func NewOptimKernels(b *Backend) (*OptimKernels, error) { return nil, ErrNoCUDA }

// Step applies one fused optimizer update.
func (k *OptimKernels) Step(a *optim.StepArgs) error { return ErrNoCUDA }

// UnscaleCheck multiplies xs by 1/scale in place and reports Inf/NaN.
func (k *OptimKernels) UnscaleCheck(xs []*tensor.Tensor, scale float64) (bool, error) {
	return false, ErrNoCUDA
}

// WrapComm makes c move this device's memory by staging it through host
// buffers.
func (b *Backend) WrapComm(c comm.Comm) (comm.Comm, error) { return nil, ErrNoCUDA }
