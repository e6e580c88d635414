//go:build cuda

package nccl

import (
	"errors"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/cuda"
	"github.com/deepgo-ml/deepgo/tensor"
)

var _ comm.DeviceStager = (*ncclComm)(nil)

// StageHost lends a device copy of host tensor h on the communicator's GPU
// (comm.DeviceStager): NCCL moves device memory only, and the rank
// agreements and gathered checkpoints hand it host tensors. The copies are
// synchronous cudaMemcpy calls; done's copy back runs after the operation's
// Wait, so the data is final.
func (c *ncclComm) StageHost(h *tensor.Tensor) (*tensor.Tensor, func(copyBack bool) error, error) {
	d, err := cuda.Malloc(c.dev, h.DType(), h.Shape()...)
	if err != nil {
		return nil, nil, err
	}
	if err := cuda.CopyToDevice(d, h); err != nil {
		return nil, nil, errors.Join(err, d.Free())
	}
	return d, func(copyBack bool) error {
		var err error
		if copyBack {
			err = cuda.CopyToHost(h, d)
		}
		return errors.Join(err, d.Free())
	}, nil
}
