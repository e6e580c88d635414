package zero

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// The host sees the engine's device memory only through the backend's Copy:
// scalars (the overflow flag, the norm), the full weights Parameters and
// checkpoints ask for, and the initial values a model hands in. On the CPU
// backend the "device" is the host and these helpers copy nothing.

// onDevice returns t where be computes: t itself when it is there already,
// else a copy, with the function that frees what was made.
func onDevice(be backend.Backend, t *tensor.Tensor) (*tensor.Tensor, func(), error) {
	if t.Device() == be.Device() {
		return t, func() {}, nil
	}
	d, err := be.Empty(t.DType(), t.Shape()...)
	if err != nil {
		return nil, nil, err
	}
	if err := be.Copy(d, t); err != nil {
		d.Free()
		return nil, nil, fmt.Errorf("copying %v to %v: %w", t, be.Device(), err)
	}
	return d, func() { d.Free() }, nil
}

// ToHost returns t in host memory: t itself on the CPU backend, else a new
// host copy the caller frees (free does that, or nothing when t was
// returned).
func ToHost(be backend.Backend, t *tensor.Tensor) (h *tensor.Tensor, free func(), err error) {
	if t.Device().IsCPU() {
		return t, func() {}, nil
	}
	h, err = tensor.Empty(t.DType(), t.Shape()...)
	if err != nil {
		return nil, nil, err
	}
	if err := be.Copy(h, t); err != nil {
		h.Free()
		return nil, nil, fmt.Errorf("copying %v to the host: %w", t, err)
	}
	return h, func() { h.Free() }, nil
}
