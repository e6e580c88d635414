//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// The argument checks of backend/check.go (unexported there), for a device
// instead of the host: same rules, same *backend.ArgError messages.

func argErr(op, arg, format string, a ...any) error {
	return &backend.ArgError{Op: op, Arg: arg, Msg: fmt.Sprintf(format, a...)}
}

func checkOne(op, arg string, t *tensor.Tensor, dev tensor.Device) error {
	if t == nil {
		return argErr(op, arg, "is nil")
	}
	if t.Device() != dev {
		return argErr(op, arg, "%v is on %v, backend is on %v", t, t.Device(), dev)
	}
	if !t.Contiguous() {
		return argErr(op, arg, "%v is not contiguous", t)
	}
	if t.Storage().Freed() {
		return argErr(op, arg, "%v: storage already freed", t)
	}
	if p := uintptr(t.Ptr()); t.Numel() > 0 && p%uintptr(t.DType().Size()) != 0 {
		return argErr(op, arg, "address %#x is not aligned to its %d-byte elements", p, t.DType().Size())
	}
	return nil
}

func list(op, name string, ts []*tensor.Tensor, dev tensor.Device, want tensor.DType) ([]unsafe.Pointer, []int64, error) {
	ptrs := make([]unsafe.Pointer, len(ts))
	ns := make([]int64, len(ts))
	for i, t := range ts {
		arg := fmt.Sprintf("%s[%d]", name, i)
		if err := checkOne(op, arg, t, dev); err != nil {
			return nil, nil, err
		}
		if t.DType() != want {
			return nil, nil, argErr(op, arg, "dtype %v, want %v like %s[0]", t.DType(), want, name)
		}
		ptrs[i] = t.Ptr()
		ns[i] = int64(t.Numel())
	}
	return ptrs, ns, nil
}

func floatDType(op, arg string, dt tensor.DType) error {
	switch dt {
	case tensor.Float32, tensor.Float16, tensor.BFloat16:
		return nil
	}
	return argErr(op, arg, "dtype %v: allowed float32, float16, bfloat16", dt)
}

func sameLens(op, a, b string, na, nb int) error {
	if na != nb {
		return argErr(op, b, "has %d entries, %s has %d", nb, a, na)
	}
	return nil
}

func sameCounts(op, name string, a, b []int64) error {
	for i := range a {
		if a[i] != b[i] {
			return argErr(op, fmt.Sprintf("%s[%d]", name, i), "has %d elements, want %d", b[i], a[i])
		}
	}
	return nil
}

func firstDType(ts []*tensor.Tensor) tensor.DType {
	for _, t := range ts {
		if t != nil {
			return t.DType()
		}
	}
	return tensor.Float32
}

// floatList is list plus the float dtype rule, for the one-list kernels.
func floatList(op, name string, ts []*tensor.Tensor, dev tensor.Device) (tensor.DType, []unsafe.Pointer, []int64, error) {
	t := firstDType(ts)
	p, n, err := list(op, name, ts, dev, t)
	if err == nil && len(ts) > 0 {
		err = floatDType(op, name+"[0]", t)
	}
	return t, p, n, err
}

func packArgs(op, name string, flat *tensor.Tensor, offs []int, ts []*tensor.Tensor, dev tensor.Device) ([]unsafe.Pointer, []int64, []int64, error) {
	if err := checkOne(op, "flat", flat, dev); err != nil {
		return nil, nil, nil, err
	}
	if err := sameLens(op, name, "offs", len(ts), len(offs)); err != nil {
		return nil, nil, nil, err
	}
	p, n, err := list(op, name, ts, dev, flat.DType())
	if err != nil {
		return nil, nil, nil, err
	}
	o := make([]int64, len(offs))
	for i, v := range offs {
		if v < 0 || int64(v)+n[i] > int64(flat.Numel()) {
			return nil, nil, nil, argErr(op, fmt.Sprintf("offs[%d]", i), "region [%d, %d) outside flat of %d elements", v, int64(v)+n[i], flat.Numel())
		}
		o[i] = int64(v)
	}
	return p, n, o, nil
}
