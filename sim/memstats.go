package sim

import "github.com/deepgo-ml/deepgo/backend"

var _ backend.MemoryStats = (*Backend)(nil)

// Allocated is the bytes of the device's live tensors (Empty's, on any of
// its streams' backends); a Free takes them off at once.
func (b *Backend) Allocated() int64 { return b.d.allocated.Bytes() }

// PeakAllocated is the highest Allocated since the last ResetPeak.
func (b *Backend) PeakAllocated() int64 { return b.d.allocated.Peak() }

// Reserved is Allocated plus the freed tensors whose stream-ordered free
// has not run yet (the work issued before the Free is still queued), as a
// caching allocator holds memory a stream may still use.
func (b *Backend) Reserved() int64 { return b.d.reserved.Bytes() }

// PeakReserved is the highest Reserved since the last ResetPeak.
func (b *Backend) PeakReserved() int64 { return b.d.reserved.Peak() }

// ResetPeak makes both peaks the counts now.
func (b *Backend) ResetPeak() {
	b.d.allocated.ResetPeak()
	b.d.reserved.ResetPeak()
}
