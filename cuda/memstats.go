//go:build cuda

package cuda

import (
	"sync"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// devMem counts each device's Malloc bytes not yet freed (int to
// *tensor.MemCounter).
var devMem sync.Map

// memOf is device dev's counter.
func memOf(dev int) *tensor.MemCounter {
	if c, ok := devMem.Load(dev); ok {
		return c.(*tensor.MemCounter)
	}
	c, _ := devMem.LoadOrStore(dev, new(tensor.MemCounter))
	return c.(*tensor.MemCounter)
}

var _ backend.MemoryStats = (*Backend)(nil)

// Allocated is the bytes of this process's live tensors on the backend's
// device (Malloc's, every backend of the device together); a Free takes
// them off when it is issued.
func (b *Backend) Allocated() int64 { return memOf(b.dev).Bytes() }

// PeakAllocated is the highest Allocated since the last ResetPeak.
func (b *Backend) PeakAllocated() int64 { return memOf(b.dev).Peak() }

// Reserved is Allocated: the memory the device's pool keeps for reuse
// (cudaMemPoolAttrReservedMemCurrent) is not read.
func (b *Backend) Reserved() int64 { return b.Allocated() }

// PeakReserved is PeakAllocated.
func (b *Backend) PeakReserved() int64 { return b.PeakAllocated() }

// ResetPeak makes the peak the count now.
func (b *Backend) ResetPeak() { memOf(b.dev).ResetPeak() }
