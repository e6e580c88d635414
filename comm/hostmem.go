package comm

import (
	"context"
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/tensor"
)

// DeviceStager is a Comm whose operations take device memory only (NCCL):
// it lends a device tensor holding a host tensor's bytes, so that
// operations on host memory (the rank agreements, a gathered checkpoint)
// still work over it. Comms that move host memory (comm/local, comm/mpi,
// the simulated device's and comm/staged) do not implement it.
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
	ds, ok := c.(DeviceStager)
	if !ok || !dst.Device().IsCPU() || !src.Device().IsCPU() {
		return c.AllGather(ctx, dst, src)
	}
	d, doneD, err := ds.StageHost(dst)
	if err != nil {
		return fmt.Errorf("comm: staging dst %v on the device: %w", dst, err)
	}
	s, doneS, err := ds.StageHost(src)
	if err != nil {
		return errors.Join(fmt.Errorf("comm: staging src %v on the device: %w", src, err), doneD(false))
	}
	err = c.AllGather(ctx, d, s)
	return errors.Join(err, doneS(false), doneD(err == nil))
}
