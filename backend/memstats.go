package backend

import "github.com/deepgo-ml/deepgo/tensor"

// MemoryStats is what a backend knows of its device's memory, as torch's
// memory_allocated, max_memory_allocated, memory_reserved and
// reset_peak_memory_stats report a GPU's (DeepSpeed's memory_breakdown
// prints them). A backend that keeps freed memory for reuse reports it in
// Reserved; one that does not reports Reserved equal to Allocated. Every
// method is safe from any goroutine and costs a few atomic loads.
type MemoryStats interface {
	// Allocated is the bytes of the device's tensors not yet freed.
	Allocated() int64
	// PeakAllocated is the highest Allocated since the last ResetPeak.
	PeakAllocated() int64
	// Reserved is the bytes the device's allocator holds (Allocated and
	// what it keeps for reuse or has not given back yet).
	Reserved() int64
	// PeakReserved is the highest Reserved since the last ResetPeak.
	PeakReserved() int64
	// ResetPeak makes both peaks the counts now.
	ResetPeak()
}

// CounterStats is a MemoryStats over counters: reserved nil means the
// allocator caches nothing, and Reserved is Allocated.
type CounterStats struct {
	Alloc, Res *tensor.MemCounter
}

// Allocated is Alloc's count.
func (s CounterStats) Allocated() int64 { return s.Alloc.Bytes() }

// PeakAllocated is Alloc's peak.
func (s CounterStats) PeakAllocated() int64 { return s.Alloc.Peak() }

// Reserved is Res's count, or Alloc's without Res.
func (s CounterStats) Reserved() int64 { return s.res().Bytes() }

// PeakReserved is Res's peak, or Alloc's without Res.
func (s CounterStats) PeakReserved() int64 { return s.res().Peak() }

// ResetPeak resets both counters' peaks.
func (s CounterStats) ResetPeak() {
	s.Alloc.ResetPeak()
	if s.Res != nil {
		s.Res.ResetPeak()
	}
}

func (s CounterStats) res() *tensor.MemCounter {
	if s.Res == nil {
		return s.Alloc
	}
	return s.Res
}

// HostStats is the host memory this process allocated through package
// tensor (tensor.HostMemory) as MemoryStats: on the CPU the device's memory
// is the host's, and every host tensor of the engine, of every in-process
// rank, comes from there. The C allocator caches nothing, so Reserved is
// Allocated.
func HostStats() MemoryStats { return CounterStats{Alloc: tensor.HostMemory()} }

// StatsOf is be's MemoryStats: be's own when it has them, HostStats for
// any other backend on the host, and false for a device backend without
// them.
func StatsOf(be Backend) (MemoryStats, bool) {
	if s, ok := be.(MemoryStats); ok {
		return s, true
	}
	if be.Device().IsCPU() {
		return HostStats(), true
	}
	return nil, false
}
