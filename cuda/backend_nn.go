//go:build cuda

package cuda

/*
#include "deepgo_cuda.h"
*/
import "C"

import (
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// The Backend is a backend.NN: the layer kernels of nn_*.cu on its stream,
// with backend.NN's argument rules (the Check functions) and its mixed
// precision. The Linear layer's half weights are widened in tiles inside
// the C call (nn_linear.cu). For the other kernels, whose weights are small
// (LayerNorm's c) or read by row (the embedding tables), a half weight is
// widened whole into the backend's staging buffer, and a half gradient
// collects the call's float32 contribution there (zeroed first), then
// receives it with one rounding per element (dg_cuda_add_f32). The staging
// buffer grows to the largest such call and is reused in stream order.

// LinearForward computes out = in @ w^T + b (backend.Linear).
func (b *Backend) LinearForward(out, in, w, bias *tensor.Tensor) error {
	const op = "LinearForward"
	d, err := backend.CheckLinear(op, b.Device(), out, in, w, bias, nil, nil, nil, nil)
	if err != nil {
		return err
	}
	if d.N > 0 && d.C > 0 && d.OC > 0 {
		if err := loadCuBLAS(); err != nil {
			return err
		}
	}
	return b.run("dg_cuda_nn_linear_forward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_linear_forward(ctx, fptr(out.Ptr()), fptr(in.Ptr()), cdt(d.W), w.Ptr(), ptrOf(bias),
			c64(d.N), c64(d.C), c64(d.OC))
	})
}

// LinearBackward accumulates din, dw and db (backend.Linear).
func (b *Backend) LinearBackward(din, dw, db, dout, in, w *tensor.Tensor) error {
	const op = "LinearBackward"
	d, err := backend.CheckLinear(op, b.Device(), nil, in, w, nil, din, dw, db, dout)
	if err != nil {
		return err
	}
	if (din != nil || dw != nil) && d.N > 0 && d.C > 0 && d.OC > 0 {
		if err := loadCuBLAS(); err != nil {
			return err
		}
	}
	return b.run("dg_cuda_nn_linear_backward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_linear_backward(ctx, fptr(ptrOf(din)), cdt(d.Grad), ptrOf(dw), ptrOf(db), fptr(dout.Ptr()),
			fptr(in.Ptr()), cdt(d.W), w.Ptr(), c64(d.N), c64(d.C), c64(d.OC))
	})
}

// LayerNormForward normalises n rows of c channels (backend.NN).
func (b *Backend) LayerNormForward(out, mean, rstd, in, w, bias *tensor.Tensor, eps float32, n, c int) error {
	if _, err := backend.CheckLayerNormForward(b.Device(), out, mean, rstd, in, w, bias, eps, n, c); err != nil {
		return err
	}
	sw, sb := &staged{t: w}, &staged{t: bias}
	return b.runStaged("dg_cuda_nn_layernorm_forward", []*staged{sw, sb}, nil, func(ctx *C.dg_cuda_ctx, _ *C.int) C.dg_status {
		return C.dg_cuda_nn_layernorm_forward(ctx, fptr(out.Ptr()), fptr(mean.Ptr()), fptr(rstd.Ptr()), fptr(in.Ptr()),
			fptr(sw.p), fptr(sb.p), C.float(eps), c64(n), c64(c))
	})
}

// LayerNormBackward accumulates din, dw and db (backend.NN).
func (b *Backend) LayerNormBackward(din, dw, db, dout, in, w, mean, rstd *tensor.Tensor, n, c int) error {
	if _, err := backend.CheckLayerNormBackward(b.Device(), din, dw, db, dout, in, w, mean, rstd, n, c); err != nil {
		return err
	}
	sw, sdw, sdb := &staged{t: w}, &staged{t: dw, grad: true}, &staged{t: db, grad: true}
	return b.runStaged("dg_cuda_nn_layernorm_backward", []*staged{sw, sdw, sdb}, nil, func(ctx *C.dg_cuda_ctx, _ *C.int) C.dg_status {
		return C.dg_cuda_nn_layernorm_backward(ctx, fptr(ptrOf(din)), fptr(sdw.p), fptr(sdb.p), fptr(dout.Ptr()), fptr(in.Ptr()),
			fptr(sw.p), fptr(mean.Ptr()), fptr(rstd.Ptr()), c64(n), c64(c))
	})
}

// GELUForward computes out = GELU(in) (backend.NN).
func (b *Backend) GELUForward(out, in *tensor.Tensor, n int) error {
	if err := backend.CheckGELUForward(b.Device(), out, in, n); err != nil {
		return err
	}
	return b.run("dg_cuda_nn_gelu_forward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_gelu_forward(ctx, fptr(out.Ptr()), fptr(in.Ptr()), c64(n))
	})
}

// GELUBackward accumulates din += GELU'(in) * dout (backend.NN).
func (b *Backend) GELUBackward(din, in, dout *tensor.Tensor, n int) error {
	if err := backend.CheckGELUBackward(b.Device(), din, in, dout, n); err != nil {
		return err
	}
	return b.run("dg_cuda_nn_gelu_backward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_gelu_backward(ctx, fptr(din.Ptr()), fptr(in.Ptr()), fptr(dout.Ptr()), c64(n))
	})
}

// Add computes out = a + c over n elements (backend.NN).
func (b *Backend) Add(out, a, c *tensor.Tensor, n int) error {
	if err := backend.CheckAdd(b.Device(), out, a, c, n); err != nil {
		return err
	}
	return b.run("dg_cuda_nn_add", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_add(ctx, fptr(out.Ptr()), fptr(a.Ptr()), fptr(c.Ptr()), c64(n))
	})
}

// EncoderForward computes out[b, t, :] = wte[tok[b, t]] + wpe[t]
// (backend.NN). It waits for the stream (the token check).
func (b *Backend) EncoderForward(out, tok, wte, wpe *tensor.Tensor, nb, t, c, v int) error {
	const op = "EncoderForward"
	if _, err := backend.CheckEncoderForward(b.Device(), out, tok, wte, wpe, nb, t, c, v); err != nil {
		return err
	}
	ste, spe := &staged{t: wte}, &staged{t: wpe}
	return b.runStaged("dg_cuda_nn_encoder_forward", []*staged{ste, spe}, backend.IDOutOfRange(op, "tok", v),
		func(ctx *C.dg_cuda_ctx, bad *C.int) C.dg_status {
			return C.dg_cuda_nn_encoder_forward(ctx, fptr(out.Ptr()), iptr(tok.Ptr()), fptr(ste.p), fptr(spe.p),
				c64(nb), c64(t), c64(c), c64(v), bad)
		})
}

// EncoderBackward accumulates dwte[tok] += dout and dwpe[t] += dout
// (backend.NN). It waits for the stream (the token check).
func (b *Backend) EncoderBackward(dwte, dwpe, dout, tok *tensor.Tensor, nb, t, c, v int) error {
	const op = "EncoderBackward"
	if _, err := backend.CheckEncoderBackward(b.Device(), dwte, dwpe, dout, tok, nb, t, c, v); err != nil {
		return err
	}
	ste, spe := &staged{t: dwte, grad: true}, &staged{t: dwpe, grad: true}
	return b.runStaged("dg_cuda_nn_encoder_backward", []*staged{ste, spe}, backend.IDOutOfRange(op, "tok", v),
		func(ctx *C.dg_cuda_ctx, bad *C.int) C.dg_status {
			return C.dg_cuda_nn_encoder_backward(ctx, fptr(ste.p), fptr(spe.p), fptr(dout.Ptr()), iptr(tok.Ptr()),
				c64(nb), c64(t), c64(c), c64(v), bad)
		})
}

// AttentionForward runs causal attention (backend.NN).
func (b *Backend) AttentionForward(out, att, qkv *tensor.Tensor, nb, t, nh, hs, window int) error {
	if err := backend.CheckAttentionForward(b.Device(), out, att, qkv, nb, t, nh, hs, window); err != nil {
		return err
	}
	return b.run("dg_cuda_nn_attention_forward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_attention_forward(ctx, fptr(out.Ptr()), fptr(att.Ptr()), fptr(qkv.Ptr()), c64(nb), c64(t), c64(nh), c64(hs), c64(window))
	})
}

// AttentionBackward accumulates dqkv from dout and the saved att
// (backend.NN).
func (b *Backend) AttentionBackward(dqkv, dout, qkv, att *tensor.Tensor, nb, t, nh, hs, window int) error {
	if err := backend.CheckAttentionBackward(b.Device(), dqkv, dout, qkv, att, nb, t, nh, hs, window); err != nil {
		return err
	}
	return b.run("dg_cuda_nn_attention_backward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_attention_backward(ctx, fptr(dqkv.Ptr()), fptr(dout.Ptr()), fptr(qkv.Ptr()), fptr(att.Ptr()),
			c64(nb), c64(t), c64(nh), c64(hs), c64(window))
	})
}

// SoftmaxXentForward writes probs and losses (backend.NN). It waits for
// the stream (the target check).
func (b *Backend) SoftmaxXentForward(probs, losses, logits, targets *tensor.Tensor, n, v int) error {
	const op = "SoftmaxXentForward"
	if err := backend.CheckSoftmaxXentForward(b.Device(), probs, losses, logits, targets, n, v); err != nil {
		return err
	}
	return b.runStaged("dg_cuda_nn_softmax_xent_forward", nil, backend.IDOutOfRange(op, "targets", v),
		func(ctx *C.dg_cuda_ctx, bad *C.int) C.dg_status {
			return C.dg_cuda_nn_softmax_xent_forward(ctx, fptr(probs.Ptr()), fptr(losses.Ptr()), fptr(logits.Ptr()),
				iptr(targets.Ptr()), c64(n), c64(v), bad)
		})
}

// SoftmaxXentBackward writes dlogits = (probs - onehot) * dlosses
// (backend.NN). It waits for the stream (the target check).
func (b *Backend) SoftmaxXentBackward(dlogits, probs, targets, dlosses *tensor.Tensor, n, v int) error {
	const op = "SoftmaxXentBackward"
	if err := backend.CheckSoftmaxXentBackward(b.Device(), dlogits, probs, targets, dlosses, n, v); err != nil {
		return err
	}
	return b.runStaged("dg_cuda_nn_softmax_xent_backward", nil, backend.IDOutOfRange(op, "targets", v),
		func(ctx *C.dg_cuda_ctx, bad *C.int) C.dg_status {
			return C.dg_cuda_nn_softmax_xent_backward(ctx, fptr(dlogits.Ptr()), fptr(probs.Ptr()), iptr(targets.Ptr()),
				fptr(dlosses.Ptr()), c64(n), c64(v), bad)
		})
}

// TransposeBlocks writes dst[j, i, :] = src[i, j, :] for src[a, b, w]
// (backend.NN).
func (b *Backend) TransposeBlocks(dst, src *tensor.Tensor, a, bs, w int) error {
	if err := backend.CheckTransposeBlocks(b.Device(), dst, src, a, bs, w); err != nil || a*bs*w == 0 {
		return err
	}
	return b.run("dg_cuda_nn_transpose_blocks", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_transpose_blocks(ctx, fptr(dst.Ptr()), fptr(src.Ptr()), c64(a), c64(bs), c64(w))
	})
}

// ptrOf is t's address, nil for a nil tensor (an optional C argument).
func ptrOf(t *tensor.Tensor) unsafe.Pointer {
	if t == nil {
		return nil
	}
	return t.Ptr()
}

// run queues one kernel call under the backend's mutex.
func (b *Backend) run(fn string, call func(ctx *C.dg_cuda_ctx) C.dg_status) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil {
		return &Error{Op: fn, Msg: "backend is closed"}
	}
	return b.err(fn, call(b.ctx))
}

// staged is one weight or gradient argument as the float32 kernels see it:
// p is t's own memory when t is float32 (nil when t is nil), else a region
// of the staging buffer.
type staged struct {
	t    *tensor.Tensor
	grad bool
	p    unsafe.Pointer
}

// stageAlign keeps every region 256-byte aligned, as cudaMalloc's blocks
// are, for the vectorized kernels that read them.
const stageAlign = 64 // float32 elements

// runStaged queues call under the backend's mutex with the arguments in
// args staged as float32 (see the top of this file). When idErr is non-nil
// the call checks ids on the device: it gets a device int, which is read
// back (a wait), and a set flag returns idErr with nothing written, half
// gradients included.
func (b *Backend) runStaged(fn string, args []*staged, idErr error, call func(ctx *C.dg_cuda_ctx, invalid *C.int) C.dg_status) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil {
		return &Error{Op: fn, Msg: "backend is closed"}
	}
	if err := b.stageArgs(args); err != nil {
		return err
	}
	var flag unsafe.Pointer
	if idErr != nil {
		res, err := b.results(1)
		if err != nil {
			return err
		}
		flag = res
	}
	if err := b.err(fn, call(b.ctx, (*C.int)(flag))); err != nil {
		return err
	}
	if idErr != nil {
		var bad int32
		if err := b.fetch(fn, unsafe.Pointer(&bad), flag, 4); err != nil {
			return err
		}
		if bad != 0 {
			return idErr
		}
	}
	for _, a := range args {
		if a.grad && a.t != nil && a.t.DType() != tensor.Float32 {
			s := C.dg_cuda_add_f32(b.ctx, cdt(a.t.DType()), a.t.Ptr(), fptr(a.p), c64(a.t.Numel()))
			if err := b.err("dg_cuda_add_f32", s); err != nil {
				return err
			}
		}
	}
	return nil
}

// stageArgs gives each argument its float32 view: a half weight widened
// into the staging buffer, a half gradient a zeroed region of it. Called
// with b.mu held.
func (b *Backend) stageArgs(args []*staged) error {
	need := 0
	for _, a := range args {
		if a.t != nil && a.t.DType() != tensor.Float32 {
			need += (a.t.Numel() + stageAlign - 1) / stageAlign * stageAlign
		}
	}
	var base unsafe.Pointer
	if need > 0 {
		if b.stage == nil || b.stage.Numel() < need {
			if b.stage != nil {
				b.stage.Free() // after the work queued on it (dg_cuda_free)
				b.stage = nil
			}
			t, err := Malloc(b.dev, tensor.Float32, need)
			if err != nil {
				return err
			}
			b.stage = t
		}
		base = b.stage.Ptr()
	}
	off := 0
	for _, a := range args {
		switch {
		case a.t == nil:
			a.p = nil
		case a.t.DType() == tensor.Float32:
			a.p = a.t.Ptr()
		default:
			n := a.t.Numel()
			a.p = unsafe.Add(base, 4*off)
			off += (n + stageAlign - 1) / stageAlign * stageAlign
			var s C.dg_status
			if a.grad {
				sz := C.size_t(4 * n)
				s = C.dg_cuda_zero(b.ctx, &a.p, &sz, 1)
			} else {
				src, n64 := a.t.Ptr(), int64(n)
				s = C.dg_cuda_cast(b.ctx, cdt(a.t.DType()), C.DG_F32, &src, &a.p, i64List([]int64{n64}), 1)
			}
			if err := b.err("stage "+a.t.DType().String(), s); err != nil {
				return err
			}
		}
	}
	return nil
}
