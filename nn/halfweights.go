package nn

import (
	"fmt"
	"unsafe"

	"github.com/deepgo-ml/deepgo/csrc"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Under fp16 or bf16 an engine binds half-precision weights and gradients.
// These layers compute in float32, so each module runs on float32 copies:
// the weights are widened before the module runs (exactly: every half value
// is a float32), and in backward the module's gradients accumulate in a
// zeroed float32 buffer that is then added into the engine's gradient with
// one rounding (widen, add, narrow). Activations stay float32 throughout, so
// this is mixed precision with float32 compute: the loss scale, the
// overflow check and the half-precision gradient buffers behave as DeepSpeed
// has them; only the arithmetic inside the layers is wider.

// shadow is one parameter's float32 working copies.
type shadow struct {
	data, grad, tmp *tensor.Tensor
}

func (s *shadow) free() {
	for _, t := range []*tensor.Tensor{s.data, s.grad, s.tmp} {
		if t != nil {
			t.Free()
		}
	}
}

func (g *GPT) shadowOf(p *model.Param) (*shadow, error) {
	if s, ok := g.shadows[p]; ok {
		return s, nil
	}
	n := p.Data.Numel()
	s := &shadow{}
	var err error
	for _, t := range []**tensor.Tensor{&s.data, &s.grad, &s.tmp} {
		if *t, err = tensor.Empty(tensor.Float32, n); err != nil {
			s.free()
			return nil, err
		}
	}
	if g.shadows == nil {
		g.shadows = map[*model.Param]*shadow{}
	}
	g.shadows[p] = s
	return s, nil
}

func (g *GPT) freeShadows() {
	for _, s := range g.shadows {
		s.free()
	}
	g.shadows = nil
}

// checkBound requires t to be a bound host tensor of a floating dtype the
// layers can take (float32 directly, float16 and bfloat16 through copies).
func checkBound(module, op, what string, p *model.Param, t *tensor.Tensor) error {
	if t == nil || t.Ptr() == nil {
		return fmt.Errorf("nn.GPT: %s.%s: parameter %s: %s is not bound", module, op, p.Name, what)
	}
	if !t.Device().IsCPU() || !t.Contiguous() || (t.DType() != tensor.Float32 && !t.DType().IsHalf()) {
		return fmt.Errorf("nn.GPT: %s.%s: parameter %s: %s is %v: not supported: these layers take float32, float16 or bfloat16 host tensors", module, op, p.Name, what, t)
	}
	return nil
}

func one(t *tensor.Tensor) ([]unsafe.Pointer, []int64) {
	return []unsafe.Pointer{t.Ptr()}, []int64{int64(t.Numel())}
}

func cast(ctx *csrc.Ctx, dst, src *tensor.Tensor) error {
	sp, n := one(src)
	dp, _ := one(dst)
	return ctx.Cast(csrc.DType(src.DType()), csrc.DType(dst.DType()), sp, dp, n)
}

// inFloat32 runs fn with own (the module's parameters, weights and, in
// Backward, gradients) and reads (parameters of other modules the module
// only reads, such as the tied wte in the head) presented as float32.
// Whatever the engine bound is restored before returning.
func (g *GPT) inFloat32(module, op string, own, reads []*model.Param, fn func() (model.Activation, error)) (model.Activation, error) {
	ctx, err := g.needCtx()
	if err != nil {
		return nil, err
	}
	backward := op == "Backward"
	type swap struct {
		p          *model.Param
		data, grad *tensor.Tensor
		sh         *shadow
		gradCopy   bool
	}
	var swaps []swap
	restore := func() {
		for _, s := range swaps {
			s.p.Data, s.p.Grad = s.data, s.grad
		}
	}
	for i, p := range append(append([]*model.Param(nil), own...), reads...) {
		withGrad := backward && i < len(own)
		if err := checkBound(module, op, "weights", p, p.Data); err != nil {
			restore()
			return nil, err
		}
		if withGrad {
			if err := checkBound(module, op, "gradient", p, p.Grad); err != nil {
				restore()
				return nil, err
			}
		}
		halfData := p.Data.DType() != tensor.Float32
		halfGrad := withGrad && p.Grad.DType() != tensor.Float32
		if !halfData && !halfGrad {
			continue
		}
		sh, err := g.shadowOf(p)
		if err != nil {
			restore()
			return nil, err
		}
		s := swap{p: p, data: p.Data, grad: p.Grad, sh: sh, gradCopy: halfGrad}
		swaps = append(swaps, s)
		if halfData {
			if err := cast(ctx, sh.data, p.Data); err != nil {
				restore()
				return nil, fmt.Errorf("nn.GPT: %s.%s: widen %s: %w", module, op, p.Name, err)
			}
			p.Data = sh.data
		}
		if halfGrad {
			zero(sh.grad)
			p.Grad = sh.grad
		}
	}
	out, err := fn()
	restore()
	if err != nil || !backward {
		return out, err
	}
	for _, s := range swaps {
		if !s.gradCopy {
			continue
		}
		// grad = narrow(widen(grad) + module's float32 gradient): one rounding
		gp, n := one(s.sh.grad)
		tp, _ := one(s.sh.tmp)
		if err := cast(ctx, s.sh.tmp, s.grad); err != nil {
			return nil, err
		}
		if err := ctx.Axpy(csrc.F32, 1, gp, tp, n); err != nil {
			return nil, err
		}
		if err := cast(ctx, s.grad, s.sh.tmp); err != nil {
			return nil, fmt.Errorf("nn.GPT: %s.%s: narrow the gradient of %s: %w", module, op, s.p.Name, err)
		}
	}
	return out, nil
}
