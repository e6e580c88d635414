package tensor

import "sync/atomic"

// MemCounter counts the bytes of an allocator now in use and their peak
// since the last ResetPeak, with atomics: safe from any goroutine and
// cheap enough for every allocation. The zero value is ready.
type MemCounter struct {
	now, peak atomic.Int64
}

// Add counts n more bytes (n < 0 counts a free) and raises the peak.
func (c *MemCounter) Add(n int64) {
	v := c.now.Add(n)
	for {
		p := c.peak.Load()
		if v <= p || c.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

// Bytes is the count now.
func (c *MemCounter) Bytes() int64 { return c.now.Load() }

// Peak is the highest count since the last ResetPeak (or the start).
func (c *MemCounter) Peak() int64 { return c.peak.Load() }

// ResetPeak makes the peak the count now, as torch's
// reset_peak_memory_stats does.
func (c *MemCounter) ResetPeak() { c.peak.Store(c.now.Load()) }

// hostMem counts the host storage NewHostStorage allocates.
var hostMem MemCounter

// HostMemory counts the host memory this process holds through
// NewHostStorage (tensor.Empty and every host allocation of the CPU
// backend): the bytes not yet freed and their peak. Go memory wrapped
// without a copy (WrapFloat32) and memory adopted by WrapStorage are not
// counted.
func HostMemory() *MemCounter { return &hostMem }
