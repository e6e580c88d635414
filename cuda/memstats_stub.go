//go:build !cuda

package cuda

// Allocated is 0: without CUDA there is no device memory.
func (b *Backend) Allocated() int64 { return 0 }

// PeakAllocated is 0.
func (b *Backend) PeakAllocated() int64 { return 0 }

// Reserved is 0.
func (b *Backend) Reserved() int64 { return 0 }

// PeakReserved is 0.
func (b *Backend) PeakReserved() int64 { return 0 }

// ResetPeak does nothing.
func (b *Backend) ResetPeak() {}
