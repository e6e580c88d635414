// Package faultbe wraps a CPU backend for fault-injection tests: the
// engine's own calls reach it, and one of them fails on demand.
package faultbe

import (
	"fmt"
	"sync/atomic"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Pooled is a backend whose pool runs the optimizer's C kernels (the CPU
// backend): wrapping it keeps them, where wrapping backend.Backend alone
// would hide them from optim.KernelsFor.
type Pooled interface {
	backend.Backend
	optim.CPUPool
}

// Of returns the backend of c, an in-process rank (comm/local), as Pooled.
func Of(c any) Pooled {
	return c.(interface{ Backend() backend.Backend }).Backend().(Pooled)
}

// CopyFault is Pooled with Copy failing, wrapping Err, while Armed holds
// true.
type CopyFault struct {
	Pooled
	Armed *atomic.Bool
	Err   error
}

// Copy fails while armed, else copies.
func (b CopyFault) Copy(dst, src *tensor.Tensor) error {
	if b.Armed.Load() {
		return fmt.Errorf("%w: copy of %v", b.Err, src)
	}
	return b.Pooled.Copy(dst, src)
}
