package zero

// This file holds stage 3 with the owned parameter partitions outside the
// backend's memory (offload_param): a ParamStore keeps them (in host memory,
// or in swap files paged through a few host buffers) and the Optimizer
// takes each one from the store just before its all-gather, copying it to
// the device first on a device backend. On the CPU backend the gather reads
// the store's buffer, which stays taken until the gather is waited for;
// with every buffer taken, the oldest gather is waited for first. After a
// module is fetched, the store starts reading the partitions of the next
// modules of the recorded trace. The fp32 master weights stay the
// optimizer's (separate even for fp32 models, whose step otherwise updates
// the partition in place); after each step the updated partitions are
// written back to the store, cast to the model dtype.

import (
	"context"
	"fmt"
	"strings"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// ParamStore holds stage 3's owned partitions (unit u: Own(u) elements of
// the model dtype) in host memory or files. offload.ParamSwapper is the
// NVMe one; HostParams keeps them in host memory.
type ParamStore interface {
	// Write stores partition u: fill writes the value into the host
	// tensor it is handed.
	Write(ctx context.Context, u int, fill func(dst *tensor.Tensor) error) error
	// Prefetch starts bringing partition u into host memory, if there is
	// room; it never waits.
	Prefetch(ctx context.Context, u int) error
	// Acquire returns partition u in host memory until Release(u).
	Acquire(ctx context.Context, u int) (*tensor.Tensor, error)
	// Release ends an Acquire.
	Release(u int)
	// Buffers is how many partitions may be acquired at once.
	Buffers() int
	// SwapUsage reports the host memory the store holds now, its peak,
	// and the partition bytes in files.
	SwapUsage() (resident, peak, disk int64)
	// Close frees what the store holds.
	Close() error
}

// NewParamStore makes a ParamStore for partitions of sizes[u] elements of
// dt, named names[u] in errors.
type NewParamStore func(dt tensor.DType, names []string, sizes []int) (ParamStore, error)

// hostParams is a ParamStore in host memory: offload_param.device "cpu"
// on a device backend.
type hostParams struct {
	parts  []*tensor.Tensor
	bytes  int64
	pinned bool // parts from the device backend's HostEmpty
}

// HostParams is the NewParamStore of offload_param.device "cpu": every
// partition in host memory from the C allocator.
func HostParams(dt tensor.DType, names []string, sizes []int) (ParamStore, error) {
	return newHostParams(tensor.Empty, false, dt, sizes)
}

// PinnedHostParams is HostParams with offload_param.pin_memory: the
// partitions in dev's HostEmpty memory (page-locked on CUDA), which its
// Copy moves to the device by DMA without staging.
func PinnedHostParams(dev backend.Backend) NewParamStore {
	return func(dt tensor.DType, _ []string, sizes []int) (ParamStore, error) {
		alloc := func(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
			return backend.HostEmpty(dev, dt, shape...)
		}
		return newHostParams(alloc, true, dt, sizes)
	}
}

func newHostParams(alloc func(tensor.DType, ...int) (*tensor.Tensor, error), pinned bool, dt tensor.DType, sizes []int) (ParamStore, error) {
	h := &hostParams{parts: make([]*tensor.Tensor, len(sizes)), pinned: pinned}
	for u, n := range sizes {
		t, err := alloc(dt, n)
		if err != nil {
			_ = h.Close()
			return nil, fmt.Errorf("zero: offload_param partition %d in host memory: %w", u, err)
		}
		h.parts[u] = t
		h.bytes += int64(t.Bytes())
	}
	return h, nil
}

// PinnedBytes is the host memory of the partitions that came from the
// device backend's HostEmpty.
func (h *hostParams) PinnedBytes() int64 {
	if !h.pinned {
		return 0
	}
	return h.bytes
}

func (h *hostParams) Write(_ context.Context, u int, fill func(dst *tensor.Tensor) error) error {
	return fill(h.parts[u])
}
func (h *hostParams) Prefetch(context.Context, int) error { return nil }
func (h *hostParams) Acquire(_ context.Context, u int) (*tensor.Tensor, error) {
	return h.parts[u], nil
}
func (h *hostParams) Release(int)                             {}
func (h *hostParams) Buffers() int                            { return len(h.parts) }
func (h *hostParams) SwapUsage() (resident, peak, disk int64) { return h.bytes, h.bytes, 0 }
func (h *hostParams) Close() error {
	for _, t := range h.parts {
		if t != nil {
			t.Free()
		}
	}
	h.parts, h.bytes = nil, 0
	return nil
}

// openParamStore makes the Config's store over the owned partitions.
func (z *Optimizer) openParamStore() error {
	if z.cfg.ParamStore == nil {
		return nil
	}
	if z.cfg.Stage != 3 {
		return fmt.Errorf("zero: not supported: a parameter store (offload_param) at stage %d: partitions exist at stage 3 only", z.cfg.Stage)
	}
	names := make([]string, len(z.lay.Units))
	sizes := make([]int, len(z.lay.Units))
	for u, unit := range z.lay.Units {
		_, sizes[u] = z.own(u)
		var mods []string
		for _, m := range unit.Modules {
			mods = append(mods, z.mods[m].Name)
		}
		names[u] = fmt.Sprintf("%d (module %s)", u, strings.Join(mods, ", "))
	}
	s, err := z.cfg.ParamStore(z.cfg.ModelDType, names, sizes)
	if err != nil {
		return fmt.Errorf("zero: zero_optimization.offload_param: %w", err)
	}
	z.pstore = s
	return nil
}

// gatherSource returns where unit u's gather reads its partition from and
// the function that gives that memory back once the gather is waited for.
func (z *Optimizer) gatherSource(ctx context.Context, u int) (*tensor.Tensor, func(), error) {
	if z.pstore == nil {
		return z.shard[u], func() {}, nil
	}
	for len(z.held) > 0 && len(z.held) >= z.pstore.Buffers() {
		if err := z.waitGather(z.held[0]); err != nil {
			return nil, nil, err
		}
	}
	h, err := z.pstore.Acquire(ctx, u)
	if err != nil {
		return nil, nil, err
	}
	if z.be.Device().IsCPU() {
		z.held = append(z.held, u)
		return h, func() { z.pstore.Release(u) }, nil
	}
	d, err := z.gathered.get(z.cfg.ModelDType, h.Numel())
	if err == nil {
		err = z.be.Copy(d, h) // returns once h is staged
	}
	z.pstore.Release(u)
	if err != nil {
		z.gathered.put(d)
		return nil, nil, fmt.Errorf("zero: offload_param: copying partition %d to %v: %w", u, z.be.Device(), err)
	}
	return d, func() { z.gathered.put(d) }, nil
}

// waitGather waits for unit u's gather in flight, if any, and gives its
// source back.
func (z *Optimizer) waitGather(u int) error {
	w := z.gwork[u]
	if w == nil {
		return nil
	}
	z.gwork[u] = nil
	err := wait(w)
	if r := z.gsrc[u]; r != nil {
		z.gsrc[u] = nil
		r()
	}
	for i, h := range z.held {
		if h == u {
			z.held = append(z.held[:i], z.held[i+1:]...)
			break
		}
	}
	return err
}

// prefetchParams starts reading the partitions of the next modules of the
// trace not gathered yet, as many as the store has buffers.
func (z *Optimizer) prefetchParams(ctx context.Context) error {
	if z.pstore == nil {
		return nil
	}
	for _, m := range z.coord.Upcoming(z.pstore.Buffers()) {
		if err := z.pstore.Prefetch(ctx, z.unitOf[m]); err != nil {
			return err
		}
	}
	return nil
}

// writeBack stores every updated partition: the model-dtype host copies
// the offloaded step wrote, else the fp32 masters cast to the model dtype.
func (z *Optimizer) writeBack(ctx context.Context) error {
	if z.pstore == nil {
		return nil
	}
	for len(z.held) > 0 { // a store refuses to overwrite a partition a gather still reads
		if err := z.waitGather(z.held[0]); err != nil {
			return err
		}
	}
	for u := range z.lay.Units {
		src := z.master[u]
		if z.copies[u] != nil {
			src = z.copies[u]
		}
		if err := z.pstore.Write(ctx, u, func(dst *tensor.Tensor) error { return z.toHostDType(dst, src) }); err != nil {
			return fmt.Errorf("zero: offload_param: storing partition %d: %w", u, err)
		}
	}
	return nil
}

// toHostDType writes src (host memory, or the backend's device) into the
// host tensor dst, casting to dst's dtype.
func (z *Optimizer) toHostDType(dst, src *tensor.Tensor) error {
	if src.Device().IsCPU() {
		be := z.be
		if !be.Device().IsCPU() {
			be = z.cfg.HostOffload // host sources on a device backend come from the offloaded step
		}
		if src.DType() == dst.DType() {
			return be.Copy(dst, src)
		}
		return be.Cast([]*tensor.Tensor{dst}, []*tensor.Tensor{src})
	}
	if src.DType() == dst.DType() {
		return z.be.Copy(dst, src)
	}
	tmp, err := z.be.Empty(dst.DType(), dst.Numel())
	if err != nil {
		return err
	}
	defer tmp.Free()
	if err := z.be.Cast([]*tensor.Tensor{tmp}, []*tensor.Tensor{src}); err != nil {
		return err
	}
	return z.be.Copy(dst, tmp)
}

// ParamStore is the store the stage-3 partitions live in (offload_param),
// nil without one.
func (z *Optimizer) ParamStore() ParamStore { return z.pstore }
