package backend

import (
	"fmt"
	"unsafe"

	"github.com/deepgo-ml/deepgo/tensor"
)

// checkOne validates one tensor argument: present, on dev, contiguous, not
// freed, aligned to its element size.
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

// list validates a tensor list and returns its pointers and element counts.
// want, when valid, is the dtype every element must have.
func list(op, name string, ts []*tensor.Tensor, dev tensor.Device, want tensor.DType, anyDType bool) ([]unsafe.Pointer, []int64, error) {
	ptrs := make([]unsafe.Pointer, len(ts))
	ns := make([]int64, len(ts))
	for i, t := range ts {
		arg := fmt.Sprintf("%s[%d]", name, i)
		if err := checkOne(op, arg, t, dev); err != nil {
			return nil, nil, err
		}
		if !anyDType && t.DType() != want {
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
