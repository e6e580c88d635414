package backend

import (
	"fmt"
	"unsafe"

	"github.com/deepgo-ml/deepgo/tensor"
)

// The argument rules every Backend applies, exported so that other backends
// (package cuda) give the same *ArgError for the same mistake.

// ArgErr builds the *ArgError for argument arg of method op.
func ArgErr(op, arg, format string, a ...any) error {
	return &ArgError{Op: op, Arg: arg, Msg: fmt.Sprintf(format, a...)}
}

// CheckTensor validates one tensor argument: present, on dev, contiguous,
// not freed, aligned to its element size.
func CheckTensor(op, arg string, t *tensor.Tensor, dev tensor.Device) error {
	if t == nil {
		return ArgErr(op, arg, "is nil")
	}
	if t.Device() != dev {
		return ArgErr(op, arg, "%v is on %v, backend is on %v", t, t.Device(), dev)
	}
	if !t.Contiguous() {
		return ArgErr(op, arg, "%v is not contiguous", t)
	}
	if t.Storage().Freed() {
		return ArgErr(op, arg, "%v: storage already freed", t)
	}
	if p := uintptr(t.Ptr()); t.Numel() > 0 && p%uintptr(t.DType().Size()) != 0 {
		return ArgErr(op, arg, "address %#x is not aligned to its %d-byte elements", p, t.DType().Size())
	}
	return nil
}

// CheckList validates a tensor list whose elements must all have dtype want
// and returns its pointers and element counts.
func CheckList(op, name string, ts []*tensor.Tensor, dev tensor.Device, want tensor.DType) ([]unsafe.Pointer, []int64, error) {
	return CheckListLike(op, name, ts, dev, want, "")
}

// CheckListLike is CheckList where want is the dtype of another argument,
// named by like ("xs[0]", "flat") in the error message; "" means the list's
// own first element.
func CheckListLike(op, name string, ts []*tensor.Tensor, dev tensor.Device, want tensor.DType, like string) ([]unsafe.Pointer, []int64, error) {
	ptrs := make([]unsafe.Pointer, len(ts))
	ns := make([]int64, len(ts))
	for i, t := range ts {
		arg := fmt.Sprintf("%s[%d]", name, i)
		if err := CheckTensor(op, arg, t, dev); err != nil {
			return nil, nil, err
		}
		if t.DType() != want {
			if like == "" {
				like = name + "[0]"
			}
			return nil, nil, ArgErr(op, arg, "dtype %v, want %v like %s", t.DType(), want, like)
		}
		ptrs[i] = t.Ptr()
		ns[i] = int64(t.Numel())
	}
	return ptrs, ns, nil
}

// CheckFloatList is CheckList for a list of one floating dtype (taken from
// its first element), the shape of the one-list kernels.
func CheckFloatList(op, name string, ts []*tensor.Tensor, dev tensor.Device) (tensor.DType, []unsafe.Pointer, []int64, error) {
	t := FirstDType(ts)
	p, n, err := CheckList(op, name, ts, dev, t)
	if err == nil && len(ts) > 0 {
		err = CheckFloatDType(op, name+"[0]", t)
	}
	return t, p, n, err
}

// CheckFloatDType allows float32, float16 and bfloat16.
func CheckFloatDType(op, arg string, dt tensor.DType) error {
	switch dt {
	case tensor.Float32, tensor.Float16, tensor.BFloat16:
		return nil
	}
	return ArgErr(op, arg, "dtype %v: allowed float32, float16, bfloat16", dt)
}

// CheckSameLens requires list b to have as many entries as list a.
func CheckSameLens(op, a, b string, na, nb int) error {
	if na != nb {
		return ArgErr(op, b, "has %d entries, %s has %d", nb, a, na)
	}
	return nil
}

// CheckSameCounts requires b[i] == a[i] element counts, naming name[i].
func CheckSameCounts(op, name string, a, b []int64) error {
	for i := range a {
		if a[i] != b[i] {
			return ArgErr(op, fmt.Sprintf("%s[%d]", name, i), "has %d elements, want %d", b[i], a[i])
		}
	}
	return nil
}

// FirstDType is the dtype of the first non-nil tensor (float32 if none).
func FirstDType(ts []*tensor.Tensor) tensor.DType {
	for _, t := range ts {
		if t != nil {
			return t.DType()
		}
	}
	return tensor.Float32
}

// CheckPack validates Pack/Unpack arguments: the flat buffer, one offset per
// tensor, every region inside flat. It returns pointers, counts and offsets.
func CheckPack(op, name string, flat *tensor.Tensor, offs []int, ts []*tensor.Tensor, dev tensor.Device) ([]unsafe.Pointer, []int64, []int64, error) {
	if err := CheckTensor(op, "flat", flat, dev); err != nil {
		return nil, nil, nil, err
	}
	if err := CheckSameLens(op, name, "offs", len(ts), len(offs)); err != nil {
		return nil, nil, nil, err
	}
	p, n, err := CheckListLike(op, name, ts, dev, flat.DType(), "flat")
	if err != nil {
		return nil, nil, nil, err
	}
	o := make([]int64, len(offs))
	for i, v := range offs {
		if v < 0 || int64(v)+n[i] > int64(flat.Numel()) {
			return nil, nil, nil, ArgErr(op, fmt.Sprintf("offs[%d]", i), "region [%d, %d) outside flat of %d elements", v, int64(v)+n[i], flat.Numel())
		}
		o[i] = int64(v)
	}
	return p, n, o, nil
}

// CheckCopy validates the arguments of Copy: dst and src present,
// contiguous, live, of one dtype and element count, each in host memory or
// on dev. It reports which of them are in host memory.
func CheckCopy(op string, dst, src *tensor.Tensor, dev tensor.Device) (dstHost, srcHost bool, err error) {
	for _, a := range []struct {
		name string
		t    *tensor.Tensor
		host *bool
	}{{"dst", dst, &dstHost}, {"src", src, &srcHost}} {
		if a.t == nil {
			return false, false, ArgErr(op, a.name, "is nil")
		}
		on := a.t.Device()
		if !on.IsCPU() && on != dev {
			return false, false, ArgErr(op, a.name, "%v is on %v: allowed the host or %v", a.t, on, dev)
		}
		if err := CheckTensor(op, a.name, a.t, on); err != nil {
			return false, false, err
		}
		*a.host = on.IsCPU()
	}
	if dst.DType() != src.DType() {
		return false, false, ArgErr(op, "dst", "dtype %v, src has %v: Copy does not convert (Cast does)", dst.DType(), src.DType())
	}
	if dst.Numel() != src.Numel() {
		return false, false, ArgErr(op, "dst", "has %d elements, src has %d", dst.Numel(), src.Numel())
	}
	return dstHost, srcHost, nil
}
