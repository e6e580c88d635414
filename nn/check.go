package nn

import (
	"fmt"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// The kernels trust every pointer and size they are given: a parameter
// bound with the wrong dtype or size would be read as something else, past
// its end. The backend checks its arguments, but only as tensors; so every
// layer call also checks what is bound against the parameters it declared,
// to name the parameter, before calling the backend.

// paramDTypes are the dtypes the layers take for parameter values and
// gradients: the kernels widen half-precision values as they read them and
// add into half-precision gradients with one rounding per element per call.
var paramDTypes = []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16}

func allowedParamDTypes() string {
	names := make([]string, len(paramDTypes))
	for i, d := range paramDTypes {
		names[i] = d.String()
	}
	return strings.Join(names, ", ")
}

// checkParam validates the tensor bound as p's value or gradient (what):
// live, on dev (the backend's device), contiguous, an allowed dtype, and
// exactly as many elements as p's declared Shape.
func checkParam(op string, dev tensor.Device, p *model.Param, what string, t *tensor.Tensor) error {
	switch {
	case t == nil:
		return fmt.Errorf("nn.%s: parameter %s has no %s bound (nn.Bind or an engine binds it)", op, p.Name, what)
	case t.Ptr() == nil:
		return fmt.Errorf("nn.%s: parameter %s: %s %v has been freed", op, p.Name, what, t)
	case t.Device() != dev:
		return fmt.Errorf("nn.%s: parameter %s: %s %v is on %v: want %s memory", op, p.Name, what, t, t.Device(), memory(dev))
	case !t.Contiguous():
		return fmt.Errorf("nn.%s: parameter %s: %s %v is not contiguous", op, p.Name, what, t)
	case !slices.Contains(paramDTypes, t.DType()):
		return fmt.Errorf("nn.%s: parameter %s: %s %v has dtype %v: allowed %s", op, p.Name, what, t, t.DType(), allowedParamDTypes())
	case t.Numel() != numel(p):
		return fmt.Errorf("nn.%s: parameter %s: %s %v has %d elements, its declared shape %v has %d", op, p.Name, what, t, t.Numel(), p.Shape, numel(p))
	}
	return nil
}

// checkParams validates the values (and, with grad, the gradients) of ps,
// which must each be declared with the shape the layer computes with
// (shapes[i]): the values must share one dtype and the gradients one (not
// necessarily the values'), since one kernel call reads each group with
// one dtype.
func checkParams(op string, dev tensor.Device, grad bool, ps []*model.Param, shapes ...[]int) error {
	for i, p := range ps {
		if !slices.Equal(p.Shape, shapes[i]) {
			return fmt.Errorf("nn.%s: parameter %s is declared with shape %v, the layer computes with %v", op, p.Name, p.Shape, shapes[i])
		}
		if err := checkParam(op, dev, p, "value", p.Data); err != nil {
			return err
		}
		if grad && !noGrad(p) {
			if err := checkParam(op, dev, p, "gradient", p.Grad); err != nil {
				return err
			}
		}
		if i == 0 {
			continue
		}
		if d, d0 := p.Data.DType(), ps[0].Data.DType(); d != d0 {
			return fmt.Errorf("nn.%s: parameter %s: value has dtype %v, %s's has %v: a layer's values must share one dtype", op, p.Name, d, ps[0].Name, d0)
		}
	}
	if grad {
		return sameGradDType(op, ps)
	}
	return nil
}

// noGrad reports whether p's gradient is skipped: p is frozen and has no
// gradient bound (model.Param.Frozen). A trainable parameter without one
// is an error of checkParam's.
func noGrad(p *model.Param) bool { return p.Frozen && p.Grad == nil }

// gradOf is the gradient a layer accumulates into for p: none for a
// frozen p, whatever is bound.
func gradOf(p *model.Param) *tensor.Tensor {
	if p.Frozen {
		return nil
	}
	return p.Grad
}

// sameGradDType checks that the gradients ps has bound share one dtype.
func sameGradDType(op string, ps []*model.Param) error {
	var first *model.Param
	for _, p := range ps {
		if noGrad(p) {
			continue
		}
		if first == nil {
			first = p
			continue
		}
		if d, d0 := p.Grad.DType(), first.Grad.DType(); d != d0 {
			return fmt.Errorf("nn.%s: parameter %s: gradient has dtype %v, %s's has %v: a layer's gradients must share one dtype", op, p.Name, d, first.Name, d0)
		}
	}
	return nil
}

// memory names where dev's tensors live, for errors.
func memory(dev tensor.Device) string {
	if dev.IsCPU() {
		return "host"
	}
	return dev.String()
}
