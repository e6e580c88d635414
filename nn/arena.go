package nn

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Arena allocates activation and scratch buffers and counts them, so that
// activation memory is a measured number, not an estimate. It is
// tensor.Arena, the type an engine hands modules for per-micro-step
// buffers; the GPT keeps two of its own for buffers that live across steps
// (freed when the batch shape changes, or by GPT.Free).
type Arena = tensor.Arena

// need checks that t is a live contiguous float32 (or int32) tensor of at
// least n elements on dev, the backend's device.
func need(op string, dev tensor.Device, name string, t *tensor.Tensor, n int, dt tensor.DType) error {
	if t == nil {
		return fmt.Errorf("nn.%s: %s is nil", op, name)
	}
	if t.DType() != dt || !t.Contiguous() || t.Device() != dev || t.Ptr() == nil {
		return fmt.Errorf("nn.%s: %s is %v: want live contiguous %v %s memory", op, name, t, dt, memory(dev))
	}
	if t.Numel() < n {
		return fmt.Errorf("nn.%s: %s has %d elements, need %d", op, name, t.Numel(), n)
	}
	return nil
}

// needF32 runs need over (name, tensor, n) triples of float32 tensors and
// returns the first error.
func needF32(op string, dev tensor.Device, args ...any) error {
	for i := 0; i+2 < len(args); i += 3 {
		t, _ := args[i+1].(*tensor.Tensor)
		if err := need(op, dev, args[i].(string), t, args[i+2].(int), tensor.Float32); err != nil {
			return err
		}
	}
	return nil
}

// zero clears gradient scratch before accumulation, on be's device.
func zero(be backend.NN, ts ...*tensor.Tensor) error {
	if err := be.Zero(ts); err != nil {
		return fmt.Errorf("nn: clearing gradient scratch: %w", err)
	}
	return nil
}

// upload copies host values (int32 token ids or float32) into dst, which
// lives on be's device, through be.Copy: the one way a model writes device
// memory from Go.
func upload[T int32 | float32](be backend.NN, dst *tensor.Tensor, vals []T) error {
	var src *tensor.Tensor
	var err error
	switch v := any(vals).(type) {
	case []int32:
		src, err = tensor.WrapInt32(v)
	case []float32:
		src, err = tensor.WrapFloat32(v)
	}
	if err != nil {
		return err
	}
	defer src.Free()
	d := dst
	if dst.Numel() != len(vals) {
		if d, err = dst.Slice(0, len(vals)); err != nil {
			return err
		}
	}
	return be.Copy(d, src)
}

// download copies the first len(dst) float32 values of src, on be's
// device, into dst.
func download(be backend.NN, dst []float32, src *tensor.Tensor) error {
	h, err := tensor.WrapFloat32(dst)
	if err != nil {
		return err
	}
	defer h.Free()
	s := src
	if src.Numel() != len(dst) {
		if s, err = src.Slice(0, len(dst)); err != nil {
			return err
		}
	}
	return be.Copy(h, s)
}
