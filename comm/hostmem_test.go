package comm_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deviceOnly is a comm that, like NCCL, refuses the host tensors it is not
// lent: AllGather accepts only tensors StageHost made.
type deviceOnly struct {
	comm.Comm
	staged map[*tensor.Tensor]bool
	backs  *atomic.Int32
}

func (d *deviceOnly) StageHost(h *tensor.Tensor) (*tensor.Tensor, func(bool) error, error) {
	t, err := tensor.Empty(h.DType(), h.Shape()...)
	if err != nil {
		return nil, nil, err
	}
	hb, _ := h.RawBytes()
	tb, _ := t.RawBytes()
	copy(tb, hb)
	d.staged[t] = true
	return t, func(back bool) error {
		if back {
			d.backs.Add(1)
			copy(hb, tb)
		}
		return t.Free()
	}, nil
}

func (d *deviceOnly) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	if !d.staged[dst] || !d.staged[src] {
		return errors.New("host tensor given to a device-only comm")
	}
	return d.Comm.AllGather(ctx, dst, src)
}

// The rank agreements work over a comm that moves device memory only: they
// stage their host buffers through it and copy the result back.
func TestAgreementsOverDeviceOnlyComm(t *testing.T) {
	var backs atomic.Int32
	err := local.Run(context.Background(), 3, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		d := &deviceOnly{Comm: c, staged: map[*tensor.Tensor]bool{}, backs: &backs}
		got, err := comm.AllGatherInt64s(ctx, d, []int64{int64(10 * c.Rank())})
		if err != nil {
			return err
		}
		if !assert.Equal(t, []int64{0, 10, 20}, got, "rank %d", c.Rank()) {
			return errors.New("wrong values")
		}
		// without staging the device-only comm refuses host tensors
		h, _ := tensor.Empty(tensor.Int64, 3)
		defer h.Free()
		s, _ := tensor.Empty(tensor.Int64, 1)
		defer s.Free()
		assert.Error(t, d.AllGather(ctx, h, s), "rank %d: unstaged host tensors", c.Rank())
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, int32(3), backs.Load(), "one copy back per rank")
}
