package nn

import (
	"fmt"

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

// zero clears a float32 host tensor (gradient scratch before accumulation).
func zero(t *tensor.Tensor) {
	if f, err := t.Float32s(); err == nil {
		clear(f)
	}
}
