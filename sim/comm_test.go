package sim_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rankOps is one rank's part of the collectives test: inputs written by
// kernels issued just before each collective, results copied back. It
// returns errors (not require) because it runs on the ranks' goroutines.
func rankOps(ctx context.Context, k kern, c comm.Comm) ([][]byte, error) {
	r := rand.New(rand.NewPCG(uint64(c.Rank()), 3))
	n, size := 24, c.Size()
	var frees []*tensor.Tensor
	defer func() {
		for _, x := range frees {
			x.Free()
		}
	}()
	put := func(dt tensor.DType, m int, random bool) (*tensor.Tensor, error) {
		h, err := tensor.Empty(dt, m)
		if err != nil {
			return nil, err
		}
		frees = append(frees, h)
		if random {
			if dt == tensor.Float32 {
				f, _ := h.Float32s()
				for i := range f {
					f[i] = float32(r.NormFloat64())
				}
			} else {
				u, _ := h.Uint16s()
				for i := range u {
					u[i] = tensor.Float32ToBFloat16(float32(r.NormFloat64()))
				}
			}
		}
		x, err := k.Empty(dt, m)
		if err != nil {
			return nil, err
		}
		frees = append(frees, x)
		return x, k.Copy(x, h)
	}
	get := func(x *tensor.Tensor) ([]byte, error) {
		h, err := tensor.Empty(x.DType(), x.Numel())
		if err != nil {
			return nil, err
		}
		defer h.Free()
		if err := k.Copy(h, x); err != nil {
			return nil, err
		}
		raw, _ := h.RawBytes()
		return append([]byte(nil), raw...), nil
	}
	var outs []*tensor.Tensor
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		x, err := put(dt, n, true)
		if err != nil {
			return nil, err
		}
		if err := k.Scale([]*tensor.Tensor{x}, 0.5); err != nil {
			return nil, err
		}
		if err := c.AllReduce(ctx, x, comm.Sum); err != nil {
			return nil, err
		}
		big, err := put(dt, n*size, true)
		if err != nil {
			return nil, err
		}
		small, err := put(dt, n, false)
		if err != nil {
			return nil, err
		}
		if err := k.Scale([]*tensor.Tensor{big}, 3); err != nil {
			return nil, err
		}
		if err := c.ReduceScatterAsync(ctx, small, big, comm.Avg).Wait(ctx); err != nil {
			return nil, err
		}
		src, err := put(dt, n, true)
		if err != nil {
			return nil, err
		}
		dst, err := put(dt, n*size, false)
		if err != nil {
			return nil, err
		}
		if err := k.Scale([]*tensor.Tensor{src}, -1); err != nil {
			return nil, err
		}
		if err := c.AllGatherAsync(ctx, dst, src).Wait(ctx); err != nil {
			return nil, err
		}
		outs = append(outs, x, small, dst)
	}
	var res [][]byte
	for _, x := range outs {
		b, err := get(x)
		if err != nil {
			return nil, err
		}
		res = append(res, b)
	}
	return res, nil
}

// All-reduce, reduce-scatter and all-gather of device tensors written by
// kernels queued just before them give, under random delays, the bits of
// the same program on the CPU backend over comm/local.
func TestCollectivesMatchCPU(t *testing.T) {
	const n = 3
	want := make([][][]byte, n)
	require.NoError(t, local.Run(ctx(t), n, local.Options{Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		k := c.(interface{ Backend() backend.Backend }).Backend().(kern)
		out, err := rankOps(ctx, k, c)
		want[c.Rank()] = out
		return err
	}))
	for _, d := range delays {
		t.Run(d.name, func(t *testing.T) {
			w, err := sim.NewWorld(n, sim.Options{MaxDelay: d.max, Seed: 5})
			require.NoError(t, err)
			defer func() { require.NoError(t, w.Close()) }()
			got := make([][][]byte, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Go(func() {
					got[r], errs[r] = rankOps(ctx(t), w.Backend(r), w.Comm(r))
				})
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			for r := range n {
				require.Equal(t, len(want[r]), len(got[r]))
				for i := range want[r] {
					require.Equal(t, want[r][i], got[r][i], "rank %d result %d", r, i)
				}
			}
		})
	}
}

// A tensor on another device given to the device's communicator fails the
// operation on every rank, as a bad argument on one rank does, within the
// deadline; so does a host tensor, as over NCCL, while comm.AllReduceHost
// stages one through the device and gets the sum; Split gives wrapped
// groups on the same backend.
func TestCommArgumentsAndSplit(t *testing.T) {
	const n = 2
	w, err := sim.NewWorldTimeout(n, sim.Options{MaxDelay: time.Millisecond}, 5*time.Second)
	require.NoError(t, err)
	defer w.Close()
	assert.Same(t, w.Backend(1), w.Comm(1).Backend())
	subs := make([]comm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { subs[r], errs[r] = w.Comm(r).Split(ctx(t), 0, -r, "rev") })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for r := range n {
		s, ok := subs[r].(*sim.Comm)
		require.True(t, ok, "%T", subs[r])
		assert.Same(t, w.Backend(r), s.Backend())
		assert.Equal(t, n-1-r, s.Rank())
	}
	for r := range n {
		wg.Go(func() {
			var x *tensor.Tensor
			if r == 0 {
				x, _ = w.Backend(1).Empty(tensor.Float32, 4) // another rank's device
			} else {
				x, _ = w.Backend(r).Empty(tensor.Float32, 4)
			}
			defer x.Free()
			errs[r] = subs[r].AllReduce(ctx(t), x, comm.Sum)
		})
	}
	wg.Wait()
	for r := range n {
		var ce *comm.Error
		require.ErrorAs(t, errs[r], &ce, "rank %d", r)
	}
	assert.ErrorIs(t, errs[0], comm.ErrInvalid)
	assert.ErrorContains(t, errs[0], fmt.Sprintf("t float32[4]@%v is not on %v", tensor.Sim(1), tensor.Sim(0)))

	// a fresh world: the failure broke this one's group
	w2, err := sim.NewWorldTimeout(n, sim.Options{MaxDelay: time.Millisecond}, 5*time.Second)
	require.NoError(t, err)
	defer w2.Close()
	hostRun := func(f func(r int, x *tensor.Tensor) error) [n][]float32 {
		var got [n][]float32
		for r := range n {
			wg.Go(func() {
				x, _ := tensor.FromFloat32([]float32{float32(r + 1), 2}, 2)
				defer x.Free()
				errs[r] = f(r, x)
				got[r], _ = x.Float32s()
				got[r] = slices.Clone(got[r])
			})
		}
		wg.Wait()
		return got
	}
	got := hostRun(func(r int, x *tensor.Tensor) error { return comm.AllReduceHost(ctx(t), w2.Comm(r), x, comm.Sum) })
	for r := range n {
		require.NoError(t, errs[r], "rank %d: AllReduceHost", r)
		assert.Equal(t, []float32{3, 4}, got[r], "rank %d: AllReduceHost", r)
	}
	hostRun(func(r int, x *tensor.Tensor) error { return w2.Comm(r).AllReduce(ctx(t), x, comm.Sum) })
	for r := range n {
		assert.ErrorIs(t, errs[r], comm.ErrInvalid, "rank %d: a host tensor", r)
	}
	assert.ErrorContains(t, errors.Join(errs[:]...), "is in host memory")
}
