//go:build cuda

package cuda

/*
#include "deepgo_cuda.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	dgstaged "github.com/deepgo-ml/deepgo/comm/staged"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Backend runs the multi-tensor kernels on one device, queued on its own
// stream: methods return once the work is queued (SumSquares and NonFinite
// return values, so they wait). Safe for concurrent use: calls are
// serialized on a mutex, which is held only while queuing.
type Backend struct {
	mu     sync.Mutex
	dev    int
	ctx    *C.dg_cuda_ctx
	stream *Stream
	res    *tensor.Tensor // device results of SumSquares/NonFinite, grown on demand
	stage  *tensor.Tensor // float32 views of the nn kernels' half weights and gradients (backend_nn.go)
	copies *Stream        // CopyAsync's, made at the first (stage.go)
}

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.NN         = (*Backend)(nil)
	_ optim.KernelSource = (*Backend)(nil)
)

// NewBackend makes a backend on device dev with its own stream.
func NewBackend(dev int) (*Backend, error) {
	if err := checkDevice("NewBackend", dev); err != nil {
		return nil, err
	}
	var ctx *C.dg_cuda_ctx
	var cuerr C.int
	if err := callErr("NewBackend", C.dg_cuda_ctx_create(C.int(dev), nil, &ctx, &cuerr), cuerr); err != nil {
		return nil, err
	}
	s := &Stream{dev: dev, s: C.dg_cuda_ctx_stream(ctx)} // owned by ctx
	return &Backend{dev: dev, ctx: ctx, stream: s}, nil
}

// Name describes the backend, e.g. "cuda:0 (runtime 13000, driver 13000)".
func (b *Backend) Name() string {
	return fmt.Sprintf("cuda:%d (runtime %d, driver %d)", b.dev, RuntimeVersion(), DriverVersion())
}

// Device is the backend's device.
func (b *Backend) Device() tensor.Device { return tensor.CUDA(b.dev) }

// Stream is the stream the kernels run on (owned by the backend).
func (b *Backend) Stream() *Stream { return b.stream }

// Empty allocates a zeroed tensor on the backend's device.
func (b *Backend) Empty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	return Malloc(b.dev, dt, shape...)
}

func (b *Backend) err(op string, s C.dg_status) error { return ctxErr(op, b.ctx, s) }

func cdt(d tensor.DType) C.dg_dtype { return C.dg_dtype(d) }

// Cast converts srcs[i] into dsts[i]. All srcs share one dtype, all dsts one.
func (b *Backend) Cast(dsts, srcs []*tensor.Tensor) error {
	const op = "Cast"
	dev := b.Device()
	if err := sameLens(op, "srcs", "dsts", len(srcs), len(dsts)); err != nil {
		return err
	}
	st, dtt := firstDType(srcs), firstDType(dsts)
	sp, sn, err := list(op, "srcs", srcs, dev, st)
	if err != nil {
		return err
	}
	dp, dn, err := list(op, "dsts", dsts, dev, dtt)
	if err != nil {
		return err
	}
	if len(srcs) > 0 {
		if err := floatDType(op, "srcs[0]", st); err != nil {
			return err
		}
		if err := floatDType(op, "dsts[0]", dtt); err != nil {
			return err
		}
	}
	if err := sameCounts(op, "dsts", sn, dn); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err("dg_cuda_cast", C.dg_cuda_cast(b.ctx, cdt(st), cdt(dtt), ptrList(sp), ptrList(dp), i64List(sn), C.int(len(sn))))
}

// Scale multiplies xs[i] in place by alpha.
func (b *Backend) Scale(xs []*tensor.Tensor, alpha float32) error {
	t, p, n, err := floatList("Scale", "xs", xs, b.Device())
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err("dg_cuda_scale", C.dg_cuda_scale(b.ctx, cdt(t), ptrList(p), i64List(n), C.int(len(n)), C.float(alpha)))
}

// Axpy does ys[i] += alpha * xs[i]; xs and ys may differ in dtype (each
// y rounded to its dtype once, as the CPU backend does: the GPT adds its
// float32 tied-embedding share into a half gradient).
func (b *Backend) Axpy(alpha float32, xs, ys []*tensor.Tensor) error {
	const op = "Axpy"
	if err := sameLens(op, "xs", "ys", len(xs), len(ys)); err != nil {
		return err
	}
	xt, xp, xn, err := floatList(op, "xs", xs, b.Device())
	if err != nil {
		return err
	}
	yt, yp, yn, err := floatList(op, "ys", ys, b.Device())
	if err != nil {
		return err
	}
	if err := sameCounts(op, "ys", xn, yn); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err("dg_cuda_axpy", C.dg_cuda_axpy_mixed(b.ctx, cdt(xt), cdt(yt), C.float(alpha), ptrList(xp), ptrList(yp), i64List(xn), C.int(len(xn))))
}

// results returns the device result buffer with room for n float64s.
// Called with b.mu held.
func (b *Backend) results(n int) (unsafe.Pointer, error) {
	if b.res == nil || b.res.Numel() < n {
		if b.res != nil {
			b.res.Free()
			b.res = nil
		}
		r, err := Malloc(b.dev, tensor.Float64, max(n, 64))
		if err != nil {
			return nil, err
		}
		b.res = r
	}
	return b.res.Ptr(), nil
}

// fetch copies n bytes of device results into Go memory p, waiting for the
// stream first (the copy runs on the legacy default stream, which waits for
// the backend's blocking stream). Called with b.mu held.
func (b *Backend) fetch(op string, p unsafe.Pointer, dev unsafe.Pointer, n int) error {
	var cuerr C.int
	return callErr(op, C.dg_cuda_memcpy(C.int(b.dev), p, dev, C.size_t(n), &cuerr), cuerr)
}

// SumSquares returns the float64 sum of squares over all xs and, when per
// is non-nil (len(xs) entries), each tensor's own. It waits for the result.
func (b *Backend) SumSquares(xs []*tensor.Tensor, per []float64) (float64, error) {
	const op = "SumSquares"
	if per != nil {
		if err := sameLens(op, "xs", "per", len(xs), len(per)); err != nil {
			return 0, err
		}
	}
	t, p, n, err := floatList(op, "xs", xs, b.Device())
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	res, err := b.results(len(xs) + 1) // total, then per
	if err != nil {
		return 0, err
	}
	var perDev *C.double
	if per != nil {
		perDev = (*C.double)(unsafe.Add(res, 8))
	}
	s := C.dg_cuda_sumsq(b.ctx, cdt(t), ptrList(p), i64List(n), C.int(len(n)), perDev, (*C.double)(res))
	if err := b.err("dg_cuda_sumsq", s); err != nil {
		return 0, err
	}
	var total float64
	if err := b.fetch(op, unsafe.Pointer(&total), res, 8); err != nil {
		return 0, err
	}
	if len(per) > 0 {
		if err := b.fetch(op, unsafe.Pointer(&per[0]), unsafe.Add(res, 8), 8*len(per)); err != nil {
			return 0, err
		}
	}
	return total, nil
}

// NonFinite reports whether any element of xs is Inf or NaN. It waits for
// the result.
func (b *Backend) NonFinite(xs []*tensor.Tensor) (bool, error) {
	t, p, n, err := floatList("NonFinite", "xs", xs, b.Device())
	if err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	res, err := b.results(1)
	if err != nil {
		return false, err
	}
	s := C.dg_cuda_nonfinite(b.ctx, cdt(t), ptrList(p), i64List(n), C.int(len(n)), (*C.int)(res))
	if err := b.err("dg_cuda_nonfinite", s); err != nil {
		return false, err
	}
	var found int32
	if err := b.fetch("NonFinite", unsafe.Pointer(&found), res, 4); err != nil {
		return false, err
	}
	return found != 0, nil
}

// Pack copies srcs[i] into flat starting at element offs[i].
func (b *Backend) Pack(flat *tensor.Tensor, offs []int, srcs []*tensor.Tensor) error {
	p, n, o, err := packArgs("Pack", "srcs", flat, offs, srcs, b.Device())
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := C.dg_cuda_pack(b.ctx, cdt(flat.DType()), ptrList(p), i64List(n), i64List(o), C.int(len(n)), flat.Ptr(), C.int64_t(flat.Numel()))
	return b.err("dg_cuda_pack", s)
}

// Unpack copies flat from element offs[i] into dsts[i].
func (b *Backend) Unpack(dsts []*tensor.Tensor, flat *tensor.Tensor, offs []int) error {
	p, n, o, err := packArgs("Unpack", "dsts", flat, offs, dsts, b.Device())
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := C.dg_cuda_unpack(b.ctx, cdt(flat.DType()), flat.Ptr(), C.int64_t(flat.Numel()), i64List(o), i64List(n), ptrList(p), C.int(len(n)))
	return b.err("dg_cuda_unpack", s)
}

// Reduce sets dst = srcs[0] op srcs[1] op ... elementwise in list order (at
// most 256 sources on CUDA: their pointers travel in the kernel parameters).
func (b *Backend) Reduce(op backend.ReduceOp, dst *tensor.Tensor, srcs []*tensor.Tensor) error {
	const name = "Reduce"
	if err := checkOne(name, "dst", dst, b.Device()); err != nil {
		return err
	}
	if len(srcs) == 0 {
		return argErr(name, "srcs", "is empty: need at least one source")
	}
	if len(srcs) > C.DG_CUDA_MAX_REDUCE_SRCS {
		return argErr(name, "srcs", "has %d entries: at most %d on CUDA", len(srcs), C.DG_CUDA_MAX_REDUCE_SRCS)
	}
	p, n, err := listLike(name, "srcs", srcs, b.Device(), dst.DType(), "dst")
	if err != nil {
		return err
	}
	for i := range n {
		if n[i] != int64(dst.Numel()) {
			return argErr(name, fmt.Sprintf("srcs[%d]", i), "has %d elements, dst has %d", n[i], dst.Numel())
		}
	}
	switch dst.DType() {
	case tensor.Float32, tensor.Float16, tensor.BFloat16, tensor.Int32, tensor.Int64:
	default:
		return argErr(name, "dst", "dtype %v: allowed float32, float16, bfloat16, int32, int64", dst.DType())
	}
	var cop C.dg_redop
	switch op {
	case backend.Sum:
		cop = C.DG_SUM
	case backend.Max:
		cop = C.DG_MAX
	case backend.Min:
		cop = C.DG_MIN
	default:
		return argErr(name, "op", "%v: allowed sum, max, min", op)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := C.dg_cuda_reduce_into(b.ctx, cdt(dst.DType()), cop, ptrList(p), C.int(len(p)), dst.Ptr(), C.int64_t(dst.Numel()))
	return b.err("dg_cuda_reduce_into", s)
}

// Copy copies src into dst (host to device, device to host, or within the
// device), queued on the backend's stream after the work already there.
// With dst on the host it returns once the data is there; with src on the
// host, once src may be reused (dg_cuda_copy says how each case gets that
// from CUDA); a device-to-device copy returns once queued.
func (b *Backend) Copy(dst, src *tensor.Tensor) error {
	if _, _, err := backend.CheckCopy("Copy", dst, src, b.Device()); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil {
		return &Error{Op: "Copy", Msg: "backend is closed"}
	}
	return b.err("dg_cuda_copy", C.dg_cuda_copy(b.ctx, dst.Ptr(), src.Ptr(), C.size_t(src.Bytes())))
}

// Zero clears every byte of each xs[i], queued on the backend's stream.
func (b *Backend) Zero(xs []*tensor.Tensor) error {
	ps := make([]unsafe.Pointer, len(xs))
	ns := make([]C.size_t, len(xs))
	for i, x := range xs {
		if err := backend.CheckTensor("Zero", fmt.Sprintf("xs[%d]", i), x, b.Device()); err != nil {
			return err
		}
		ps[i], ns[i] = x.Ptr(), C.size_t(x.Bytes())
	}
	if len(xs) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil {
		return &Error{Op: "Zero", Msg: "backend is closed"}
	}
	return b.err("dg_cuda_zero", C.dg_cuda_zero(b.ctx, ptrList(ps), &ns[0], C.int(len(xs))))
}

// OptimKernels runs optim's fused steps on this backend (optim.KernelSource,
// how optim.New finds them).
func (b *Backend) OptimKernels() (optim.Kernels, error) { return NewOptimKernels(b) }

// Synchronize waits until all work queued on the backend is done, or ctx
// ends (the work then goes on; a later Synchronize waits for it).
func (b *Backend) Synchronize(ctx context.Context) error { return b.stream.Synchronize(ctx) }

// Close waits for the stream and releases it and the scratch memory.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil {
		return nil
	}
	for _, t := range []**tensor.Tensor{&b.res, &b.stage} {
		if *t != nil {
			(*t).Free()
			*t = nil
		}
	}
	var err error
	if b.copies != nil {
		// work still queued on it completes before its resources go
		err = b.copies.Close()
		b.copies = nil
	}
	C.dg_cuda_ctx_destroy(b.ctx)
	b.ctx = nil
	return err
}

// WrapComm makes c, a comm over host memory (in-process comm/local ranks
// sharing this GPU), move this device's memory by staging it through host
// buffers (package comm/staged): the engine's DeviceComm hook. Ranks on
// GPUs of their own use NCCL instead (package nccl).
func (b *Backend) WrapComm(c comm.Comm) (comm.Comm, error) { return dgstaged.New(c, b), nil }
