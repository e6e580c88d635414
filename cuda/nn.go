//go:build cuda

package cuda

/*
#include <stdlib.h>
#include "deepgo_cuda.h"
*/
import "C"

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// NNKernels runs the layer kernels of package nn (deepgo.h's "nn ops") on a
// Backend's device and stream: one method per method of csrc.Ctx's nn
// binding (csrc/nn.go), same names, argument order and meaning, taking
// device tensors (float32; tokens and targets int32) instead of raw host
// pointers. Backward methods accumulate into their gradients (a nil
// gradient is skipped); SoftmaxXentBackward writes. Results match the CPU
// kernels bit for bit except where CUDA's log or cuBLAS's summation order
// differ from glibc's and OpenBLAS's (tanh and exp are dg_nn_math.h's own
// arithmetic on both sides; see nn_test.go for the tolerances).
//
// Methods return once the work is queued, except EncoderForward,
// EncoderBackward and SoftmaxXent*, which wait for the stream to learn
// whether a token or target was outside [0, v) (nothing is written then).
// Safe for concurrent use (the Backend's mutex).
//
// Package nn does not call these yet: its layers take a *csrc.Ctx and host
// tensors; dispatching them to NNKernels is a later step.
type NNKernels struct {
	b *Backend
}

// NewNNKernels runs the nn kernels on b.
func NewNNKernels(b *Backend) (*NNKernels, error) {
	if b == nil {
		return nil, &Error{Op: "NewNNKernels", Msg: "backend is nil"}
	}
	return &NNKernels{b: b}, nil
}

var (
	blasOnce sync.Once
	blasErr  error
)

// loadCuBLAS loads cuBLAS (CuBLASSoname) once per process: the C loader's places
// (deepgo_cuda.h: $DEEPGO_CUBLAS_LIB, build/cuda/lib next to the
// executable, the loader's path, $CUDA_HOME/lib64, /usr/local/cuda/lib64),
// then build/cuda/lib of the source tree this package was compiled from
// (for `go test` binaries, which live in a temporary folder).
func loadCuBLAS() error {
	blasOnce.Do(func() {
		var buf [1024]C.char
		if C.dg_cuda_blas_load(nil, &buf[0], C.size_t(len(buf))) == C.DG_OK {
			return
		}
		tried := []string{C.GoString(&buf[0])}
		if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
			p := filepath.Join(filepath.Dir(file), "..", "build", "cuda", "lib", CuBLASSoname())
			cp := C.CString(p)
			rc := C.dg_cuda_blas_load(cp, &buf[0], C.size_t(len(buf)))
			C.free(unsafe.Pointer(cp))
			if rc == C.DG_OK {
				return
			}
			tried = append(tried, C.GoString(&buf[0]))
		}
		blasErr = &Error{Op: "cuBLAS", Msg: strings.Join(tried, "; ")}
	})
	return blasErr
}

// CuBLASPath is the libcublas file the nn matmuls use ("" until the first
// matmul, or when none could be loaded).
func CuBLASPath() string { return C.GoString(C.dg_cuda_blas_path()) }

// CuBLASSoname is the cuBLAS the matmuls load: libcublas.so.<major> of the
// cuBLAS headers the CUDA library was compiled with ("libcublas.so.13").
func CuBLASSoname() string { return C.GoString(C.dg_cuda_blas_soname()) }

// arg validates one device tensor argument: on the backend's device, dtype
// dt, at least need elements. A nil tensor is allowed (nil pointer) when
// optional.
func (k *NNKernels) arg(op, name string, t *tensor.Tensor, dt tensor.DType, need int, optional bool) (unsafe.Pointer, error) {
	if t == nil && optional {
		return nil, nil
	}
	if err := checkOne(op, name, t, k.b.Device()); err != nil {
		return nil, err
	}
	if t.DType() != dt {
		return nil, argErr(op, name, "dtype %v, want %v", t.DType(), dt)
	}
	if t.Numel() < need {
		return nil, argErr(op, name, "has %d elements, need %d", t.Numel(), need)
	}
	return t.Ptr(), nil
}

type nnArg struct {
	name     string
	t        *tensor.Tensor
	dt       tensor.DType
	need     int
	optional bool
	p        *unsafe.Pointer
}

func f32(name string, t *tensor.Tensor, need int, p *unsafe.Pointer) nnArg {
	return nnArg{name, t, tensor.Float32, need, false, p}
}

func f32opt(name string, t *tensor.Tensor, need int, p *unsafe.Pointer) nnArg {
	return nnArg{name, t, tensor.Float32, need, true, p}
}

func i32(name string, t *tensor.Tensor, need int, p *unsafe.Pointer) nnArg {
	return nnArg{name, t, tensor.Int32, need, false, p}
}

// args checks the sizes (none negative, products without overflow) and
// every tensor argument, filling in the pointers.
func (k *NNKernels) args(op string, dims []int, as ...nnArg) error {
	if k == nil || k.b == nil {
		return &Error{Op: op, Msg: "NNKernels not made by NewNNKernels"}
	}
	prod := 1
	for _, d := range dims {
		if d < 0 {
			return argErr(op, "sizes", "%v: negative", dims)
		}
		if d != 0 && prod > (1<<62)/d {
			return argErr(op, "sizes", "%v: too large", dims)
		}
		prod *= max(d, 1)
	}
	for _, a := range as {
		p, err := k.arg(op, a.name, a.t, a.dt, a.need, a.optional)
		if err != nil {
			return err
		}
		*a.p = p
	}
	return nil
}

func fptr(p unsafe.Pointer) *C.float   { return (*C.float)(p) }
func iptr(p unsafe.Pointer) *C.int32_t { return (*C.int32_t)(p) }
func c64(n int) C.int64_t              { return C.int64_t(n) }

// run queues one kernel call under the backend's mutex.
func (k *NNKernels) run(fn string, call func(ctx *C.dg_cuda_ctx) C.dg_status) error {
	k.b.mu.Lock()
	defer k.b.mu.Unlock()
	if k.b.ctx == nil {
		return &Error{Op: fn, Msg: "backend is closed"}
	}
	return k.b.err(fn, call(k.b.ctx))
}

// runChecked is run for the kernels that check ids on the device: it hands
// them a device int from the backend's result buffer and reads it back.
func (k *NNKernels) runChecked(fn, what string, call func(ctx *C.dg_cuda_ctx, invalid *C.int) C.dg_status) error {
	k.b.mu.Lock()
	defer k.b.mu.Unlock()
	if k.b.ctx == nil {
		return &Error{Op: fn, Msg: "backend is closed"}
	}
	res, err := k.b.results(1)
	if err != nil {
		return err
	}
	if err := k.b.err(fn, call(k.b.ctx, (*C.int)(res))); err != nil {
		return err
	}
	var bad int32
	if err := k.b.fetch(fn, unsafe.Pointer(&bad), res, 4); err != nil {
		return err
	}
	if bad != 0 {
		return &Error{Op: fn, Msg: fmt.Sprintf("invalid argument: a %s outside [0, v); nothing written", what)}
	}
	return nil
}

// MatmulForward computes out[n,oc] = inp[n,c] @ w[oc,c]^T + bias[oc] (bias may be nil).
func (k *NNKernels) MatmulForward(out, inp, w, bias *tensor.Tensor, n, c, oc int) error {
	const op = "MatmulForward"
	var po, pi, pw, pb unsafe.Pointer
	if err := k.args(op, []int{n, c, oc}, f32("out", out, n*oc, &po), f32("inp", inp, n*c, &pi),
		f32("w", w, oc*c, &pw), f32opt("bias", bias, oc, &pb)); err != nil {
		return err
	}
	if n > 0 && c > 0 && oc > 0 {
		if err := loadCuBLAS(); err != nil {
			return err
		}
	}
	return k.run("dg_cuda_nn_matmul_forward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_matmul_forward(ctx, fptr(po), fptr(pi), fptr(pw), fptr(pb), c64(n), c64(c), c64(oc))
	})
}

// MatmulBackward accumulates dinp += dout @ w, dw += dout^T @ inp, dbias +=
// column sums of dout; a nil gradient is skipped.
func (k *NNKernels) MatmulBackward(dinp, dw, dbias, dout, inp, w *tensor.Tensor, n, c, oc int) error {
	const op = "MatmulBackward"
	var pdi, pdw, pdb, pdo, pi, pw unsafe.Pointer
	if err := k.args(op, []int{n, c, oc}, f32opt("dinp", dinp, n*c, &pdi), f32opt("dw", dw, oc*c, &pdw),
		f32opt("dbias", dbias, oc, &pdb), f32("dout", dout, n*oc, &pdo),
		f32opt("inp", inp, n*c, &pi), f32opt("w", w, oc*c, &pw)); err != nil {
		return err
	}
	if (dinp != nil && w == nil) || (dw != nil && inp == nil) {
		return argErr(op, "w/inp", "dinp needs w, dw needs inp")
	}
	if (dinp != nil || dw != nil) && n > 0 && c > 0 && oc > 0 {
		if err := loadCuBLAS(); err != nil {
			return err
		}
	}
	return k.run("dg_cuda_nn_matmul_backward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_matmul_backward(ctx, fptr(pdi), fptr(pdw), fptr(pdb), fptr(pdo), fptr(pi), fptr(pw), c64(n), c64(c), c64(oc))
	})
}

// LayerNormForward normalises n rows of c channels, saving mean[n] and rstd[n].
func (k *NNKernels) LayerNormForward(out, mean, rstd, inp, w, b *tensor.Tensor, eps float32, n, c int) error {
	const op = "LayerNormForward"
	var po, pm, pr, pi, pw, pb unsafe.Pointer
	if err := k.args(op, []int{n, c}, f32("out", out, n*c, &po), f32("mean", mean, n, &pm), f32("rstd", rstd, n, &pr),
		f32("inp", inp, n*c, &pi), f32("w", w, c, &pw), f32("b", b, c, &pb)); err != nil {
		return err
	}
	return k.run("dg_cuda_nn_layernorm_forward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_layernorm_forward(ctx, fptr(po), fptr(pm), fptr(pr), fptr(pi), fptr(pw), fptr(pb), C.float(eps), c64(n), c64(c))
	})
}

// LayerNormBackward accumulates dinp, dw and db (each may be nil).
func (k *NNKernels) LayerNormBackward(dinp, dw, db, dout, inp, w, mean, rstd *tensor.Tensor, n, c int) error {
	const op = "LayerNormBackward"
	var pdi, pdw, pdb, pdo, pi, pw, pm, pr unsafe.Pointer
	if err := k.args(op, []int{n, c}, f32opt("dinp", dinp, n*c, &pdi), f32opt("dw", dw, c, &pdw), f32opt("db", db, c, &pdb),
		f32("dout", dout, n*c, &pdo), f32("inp", inp, n*c, &pi), f32("w", w, c, &pw),
		f32("mean", mean, n, &pm), f32("rstd", rstd, n, &pr)); err != nil {
		return err
	}
	return k.run("dg_cuda_nn_layernorm_backward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_layernorm_backward(ctx, fptr(pdi), fptr(pdw), fptr(pdb), fptr(pdo), fptr(pi), fptr(pw), fptr(pm), fptr(pr), c64(n), c64(c))
	})
}

// GELUForward computes out = GELU(inp) (tanh approximation) over n elements.
func (k *NNKernels) GELUForward(out, inp *tensor.Tensor, n int) error {
	var po, pi unsafe.Pointer
	if err := k.args("GELUForward", []int{n}, f32("out", out, n, &po), f32("inp", inp, n, &pi)); err != nil {
		return err
	}
	return k.run("dg_cuda_nn_gelu_forward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_gelu_forward(ctx, fptr(po), fptr(pi), c64(n))
	})
}

// GELUBackward accumulates dinp += GELU'(inp) * dout.
func (k *NNKernels) GELUBackward(dinp, inp, dout *tensor.Tensor, n int) error {
	var pd, pi, po unsafe.Pointer
	if err := k.args("GELUBackward", []int{n}, f32("dinp", dinp, n, &pd), f32("inp", inp, n, &pi), f32("dout", dout, n, &po)); err != nil {
		return err
	}
	return k.run("dg_cuda_nn_gelu_backward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_gelu_backward(ctx, fptr(pd), fptr(pi), fptr(po), c64(n))
	})
}

// Add computes out = a + b over n elements (out may alias a or b).
func (k *NNKernels) Add(out, a, b *tensor.Tensor, n int) error {
	var po, pa, pb unsafe.Pointer
	if err := k.args("Add", []int{n}, f32("out", out, n, &po), f32("a", a, n, &pa), f32("b", b, n, &pb)); err != nil {
		return err
	}
	return k.run("dg_cuda_nn_add", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_add(ctx, fptr(po), fptr(pa), fptr(pb), c64(n))
	})
}

// EncoderForward computes out[b,t,:] = wte[tok[b,t]] + wpe[t]; tok is int32.
// It waits for the stream (the token check).
func (k *NNKernels) EncoderForward(out, tok, wte, wpe *tensor.Tensor, b, t, c, v int) error {
	var po, ptok, pte, ppe unsafe.Pointer
	if err := k.args("EncoderForward", []int{b, t, c, v}, f32("out", out, b*t*c, &po), i32("tok", tok, b*t, &ptok),
		f32("wte", wte, v*c, &pte), f32("wpe", wpe, t*c, &ppe)); err != nil {
		return err
	}
	return k.runChecked("dg_cuda_nn_encoder_forward", "token", func(ctx *C.dg_cuda_ctx, bad *C.int) C.dg_status {
		return C.dg_cuda_nn_encoder_forward(ctx, fptr(po), iptr(ptok), fptr(pte), fptr(ppe), c64(b), c64(t), c64(c), c64(v), bad)
	})
}

// EncoderBackward accumulates dwte[tok] += dout and dwpe[t] += dout (either
// may be nil). It waits for the stream (the token check).
func (k *NNKernels) EncoderBackward(dwte, dwpe, dout, tok *tensor.Tensor, b, t, c, v int) error {
	var pte, ppe, pdo, ptok unsafe.Pointer
	if err := k.args("EncoderBackward", []int{b, t, c, v}, f32opt("dwte", dwte, v*c, &pte), f32opt("dwpe", dwpe, t*c, &ppe),
		f32("dout", dout, b*t*c, &pdo), i32("tok", tok, b*t, &ptok)); err != nil {
		return err
	}
	return k.runChecked("dg_cuda_nn_encoder_backward", "token", func(ctx *C.dg_cuda_ctx, bad *C.int) C.dg_status {
		return C.dg_cuda_nn_encoder_backward(ctx, fptr(pte), fptr(ppe), fptr(pdo), iptr(ptok), c64(b), c64(t), c64(c), c64(v), bad)
	})
}

// AttentionForward runs causal attention over qkv[b,t,3*nh*hs] into
// out[b,t,nh*hs], saving the weights in att[b,nh,t,backend.AttentionSpan(t, window)];
// window <= 0 is full.
func (k *NNKernels) AttentionForward(out, att, qkv *tensor.Tensor, b, t, nh, hs, window int) error {
	var po, pa, pq unsafe.Pointer
	c := nh * hs
	if err := k.args("AttentionForward", []int{b, nh, t, t, 3, hs}, f32("out", out, b*t*c, &po), f32("att", att, b*nh*t*backend.AttentionSpan(t, window), &pa),
		f32("qkv", qkv, b*t*3*c, &pq)); err != nil {
		return err
	}
	return k.run("dg_cuda_nn_attention_forward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_attention_forward(ctx, fptr(po), fptr(pa), fptr(pq), c64(b), c64(t), c64(nh), c64(hs), c64(window))
	})
}

// AttentionBackward accumulates dqkv from dout and the saved att.
func (k *NNKernels) AttentionBackward(dqkv, dout, qkv, att *tensor.Tensor, b, t, nh, hs, window int) error {
	var pd, po, pq, pa unsafe.Pointer
	c := nh * hs
	if err := k.args("AttentionBackward", []int{b, nh, t, t, 3, hs}, f32("dqkv", dqkv, b*t*3*c, &pd), f32("dout", dout, b*t*c, &po),
		f32("qkv", qkv, b*t*3*c, &pq), f32("att", att, b*nh*t*backend.AttentionSpan(t, window), &pa)); err != nil {
		return err
	}
	return k.run("dg_cuda_nn_attention_backward", func(ctx *C.dg_cuda_ctx) C.dg_status {
		return C.dg_cuda_nn_attention_backward(ctx, fptr(pd), fptr(po), fptr(pq), fptr(pa), c64(b), c64(t), c64(nh), c64(hs), c64(window))
	})
}

// SoftmaxXentForward writes probs = softmax(logits) per row and losses[n] =
// -log probs[n, targets[n]]; probs may alias logits; targets is int32. It
// waits for the stream (the target check).
func (k *NNKernels) SoftmaxXentForward(probs, losses, logits, targets *tensor.Tensor, n, v int) error {
	var pp, pl, px, pt unsafe.Pointer
	if err := k.args("SoftmaxXentForward", []int{n, v}, f32("probs", probs, n*v, &pp), f32("losses", losses, n, &pl),
		f32("logits", logits, n*v, &px), i32("targets", targets, n, &pt)); err != nil {
		return err
	}
	return k.runChecked("dg_cuda_nn_softmax_xent_forward", "target", func(ctx *C.dg_cuda_ctx, bad *C.int) C.dg_status {
		return C.dg_cuda_nn_softmax_xent_forward(ctx, fptr(pp), fptr(pl), fptr(px), iptr(pt), c64(n), c64(v), bad)
	})
}

// SoftmaxXentBackward writes dlogits = (probs - onehot) * dlosses per row;
// dlogits may alias probs. It waits for the stream (the target check).
func (k *NNKernels) SoftmaxXentBackward(dlogits, probs, targets, dlosses *tensor.Tensor, n, v int) error {
	var pd, pp, pt, pl unsafe.Pointer
	if err := k.args("SoftmaxXentBackward", []int{n, v}, f32("dlogits", dlogits, n*v, &pd), f32("probs", probs, n*v, &pp),
		i32("targets", targets, n, &pt), f32("dlosses", dlosses, n, &pl)); err != nil {
		return err
	}
	return k.runChecked("dg_cuda_nn_softmax_xent_backward", "target", func(ctx *C.dg_cuda_ctx, bad *C.int) C.dg_status {
		return C.dg_cuda_nn_softmax_xent_backward(ctx, fptr(pd), fptr(pp), iptr(pt), fptr(pl), c64(n), c64(v), bad)
	})
}
