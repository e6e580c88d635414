package comm

import (
	"context"
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/tensor"
)

// DeviceStager is a Comm whose operations take device memory only (NCCL,
// and the simulated device's, which models it): it lends a device tensor
// holding a host tensor's bytes, so that operations on host memory (the
// rank agreements, a gathered checkpoint, a layer's per-row scalars)
// still work over it. Comms that move host memory (comm/local, comm/mpi,
// comm/gloo, comm/staged) do not implement it.
type DeviceStager interface {
	// StageHost returns a device tensor of h's dtype and shape holding h's
	// bytes, and done, which copies the device tensor back into h when
	// copyBack is set and frees it. The copies are synchronous.
	StageHost(h *tensor.Tensor) (d *tensor.Tensor, done func(copyBack bool) error, err error)
}

// AllGatherHost is c.AllGather(ctx, dst, src) for host tensors dst and
// src, through device copies when c moves device memory only
// (DeviceStager).
func AllGatherHost(ctx context.Context, c Comm, dst, src *tensor.Tensor) error {
	return stagedPair(c, dst, src, func(d, s *tensor.Tensor) error { return c.AllGather(ctx, d, s) })
}

// stagedPair runs op on host tensors dst and src, through device copies
// (dst's copied back after a successful op) when c moves device memory
// only, else on the tensors themselves.
func stagedPair(c Comm, dst, src *tensor.Tensor, op func(dst, src *tensor.Tensor) error) error {
	ds := stagerOf(c)
	if ds == nil || !dst.Device().IsCPU() || !src.Device().IsCPU() {
		return op(dst, src)
	}
	d, doneD, err := ds.StageHost(dst)
	if err != nil {
		return fmt.Errorf("comm: staging dst %v on the device: %w", dst, err)
	}
	s, doneS, err := ds.StageHost(src)
	if err != nil {
		return errors.Join(fmt.Errorf("comm: staging src %v on the device: %w", src, err), doneD(false))
	}
	err = op(d, s)
	return errors.Join(err, doneS(false), doneD(err == nil))
}

// AllReduceHost is c.AllReduce(ctx, t, op) for a host tensor t, through a
// device copy when c moves device memory only (DeviceStager): a layer
// that reduces a few host scalars per row (the vocabulary-parallel
// cross-entropy's) works over NCCL as over a host comm.
func AllReduceHost(ctx context.Context, c Comm, t *tensor.Tensor, op ReduceOp) error {
	return staged(c, t, true, func(d *tensor.Tensor) error { return c.AllReduce(ctx, d, op) })
}

// staged runs op on host tensor t, through a device copy (copied back
// after a successful op when back) when c moves device memory only, else
// on t itself.
func staged(c Comm, t *tensor.Tensor, back bool, op func(*tensor.Tensor) error) error {
	ds := stagerOf(c)
	if ds == nil || !t.Device().IsCPU() {
		return op(t)
	}
	d, done, err := ds.StageHost(t)
	if err != nil {
		return fmt.Errorf("comm: staging %v on the device: %w", t, err)
	}
	err = op(d)
	return errors.Join(err, done(back && err == nil))
}

// AllToAllHost is c.AllToAll(ctx, dst, src) for host tensors dst and src,
// through device copies when c moves device memory only (DeviceStager).
func AllToAllHost(ctx context.Context, c Comm, dst, src *tensor.Tensor) error {
	return stagedPair(c, dst, src, func(d, s *tensor.Tensor) error { return c.AllToAll(ctx, d, s) })
}

// stagerOf is the DeviceStager c is or wraps (a comms_logger wrapper over
// an NCCL comm: its Unwrap), nil when c moves host memory.
func stagerOf(c Comm) DeviceStager {
	for c != nil {
		if ds, ok := c.(DeviceStager); ok {
			return ds
		}
		u, ok := c.(interface{ Unwrap() Comm })
		if !ok {
			return nil
		}
		c = u.Unwrap()
	}
	return nil
}

// SendHost is c.Send(ctx, t, peer) for a host tensor t, through a device
// copy when c moves device memory only (DeviceStager).
func SendHost(ctx context.Context, c Comm, t *tensor.Tensor, peer int) error {
	return staged(c, t, false, func(d *tensor.Tensor) error { return c.Send(ctx, d, peer) })
}

// RecvHost is c.Recv(ctx, t, peer) into a host tensor t, through a device
// copy when c moves device memory only (DeviceStager).
func RecvHost(ctx context.Context, c Comm, t *tensor.Tensor, peer int) error {
	return staged(c, t, true, func(d *tensor.Tensor) error { return c.Recv(ctx, d, peer) })
}
