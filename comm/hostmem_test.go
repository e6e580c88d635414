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

var errHost = errors.New("host tensor given to a device-only comm")

func (d *deviceOnly) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	if !d.staged[dst] || !d.staged[src] {
		return errHost
	}
	return d.Comm.AllGather(ctx, dst, src)
}

func (d *deviceOnly) AllReduce(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) error {
	if !d.staged[t] {
		return errHost
	}
	return d.Comm.AllReduce(ctx, t, op)
}

func (d *deviceOnly) AllToAll(ctx context.Context, dst, src *tensor.Tensor) error {
	if !d.staged[dst] || !d.staged[src] {
		return errHost
	}
	return d.Comm.AllToAll(ctx, dst, src)
}

func (d *deviceOnly) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	if !d.staged[t] {
		return errHost
	}
	return d.Comm.Send(ctx, t, peer)
}

func (d *deviceOnly) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	if !d.staged[t] {
		return errHost
	}
	return d.Comm.Recv(ctx, t, peer)
}

// wrapped hides a comm behind a wrapper that only Unwrap reveals, as the
// comms_logger's does.
type wrapped struct{ comm.Comm }

func (w wrapped) Unwrap() comm.Comm { return w.Comm }

// Every *Host helper stages its host tensors through a device-only comm,
// also one behind an Unwrap wrapper, and gets the values a host comm
// gives; the comm itself refuses them unstaged.
func TestHostHelpersOverDeviceOnlyComm(t *testing.T) {
	f32 := func(vs ...float32) *tensor.Tensor {
		x, err := tensor.Empty(tensor.Float32, len(vs))
		require.NoError(t, err)
		s, _ := x.Float32s()
		copy(s, vs)
		return x
	}
	vals := func(x *tensor.Tensor) []float32 { s, _ := x.Float32s(); return append([]float32(nil), s...) }
	for _, wrap := range []bool{false, true} {
		err := local.Run(context.Background(), 2, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
			var backs atomic.Int32
			d := &deviceOnly{Comm: c, staged: map[*tensor.Tensor]bool{}, backs: &backs}
			var g comm.Comm = d
			if wrap {
				g = wrapped{d}
			}
			r := float32(c.Rank())
			x := f32(1+r, 10+r)
			defer x.Free()
			require.ErrorIs(t, g.AllReduce(ctx, x, comm.Sum), errHost, "unstaged")
			require.NoError(t, comm.AllReduceHost(ctx, g, x, comm.Sum))
			assert.Equal(t, []float32{3, 21}, vals(x), "AllReduceHost rank %d wrap %v", c.Rank(), wrap)

			src, dst := f32(10*r, 10*r+1), f32(0, 0)
			defer src.Free()
			defer dst.Free()
			require.NoError(t, comm.AllToAllHost(ctx, g, dst, src))
			assert.Equal(t, []float32{r, 10 + r}, vals(dst), "AllToAllHost rank %d wrap %v", c.Rank(), wrap)

			p := f32(7+r, 8+r)
			defer p.Free()
			if c.Rank() == 0 {
				require.NoError(t, comm.SendHost(ctx, g, p, 1))
			} else {
				require.NoError(t, comm.RecvHost(ctx, g, p, 0))
				assert.Equal(t, []float32{7, 8}, vals(p), "RecvHost wrap %v", wrap)
			}
			return nil
		})
		require.NoError(t, err, "wrap %v", wrap)
	}
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
