package staged_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/comm/staged"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultTimeout is the group deadline of the fault tests: short, so that a
// hang shows as a timeout rather than a stuck test.
const faultTimeout = 2 * time.Second

// failBack is a sim backend whose copies to the device fail once armed.
type failBack struct {
	*sim.Backend
	armed atomic.Bool
}

func (f *failBack) Copy(dst, src *tensor.Tensor) error {
	if f.armed.Load() && !dst.Device().IsCPU() {
		return errors.New("injected: copy to the device failed")
	}
	return f.Backend.Copy(dst, src)
}

// breakDevice makes be's stream fail a kernel (a token id out of range),
// so that its next copy to the host returns the sticky error.
func breakDevice(t testing.TB, be *sim.Backend) {
	t.Helper()
	mk := func(dt tensor.DType) *tensor.Tensor {
		x, err := be.Empty(dt, 1)
		require.NoError(t, err)
		t.Cleanup(func() { x.Free() })
		return x
	}
	out, tok, wte, wpe := mk(tensor.Float32), mk(tensor.Int32), mk(tensor.Float32), mk(tensor.Float32)
	h, err := tensor.WrapInt32([]int32{5}, 1)
	require.NoError(t, err)
	require.NoError(t, be.Copy(tok, h))
	require.NoError(t, be.EncoderForward(out, tok, wte, wpe, 1, 1, 1, 1))
}

// TestRankFaultFailsGroup: when rank 1 cannot stage (or stage back), or
// never comes, every other rank's operation fails within the deadline
// with a *comm.Error naming rank 1, instead of hanging.
func TestRankFaultFailsGroup(t *testing.T) {
	const bad = 1
	cases := []struct {
		name string
		// spoil prepares rank 1 before its AllReduce; x is its input
		spoil     func(t *testing.T, be *failBack, x *tensor.Tensor)
		absent    bool  // rank 1 makes no call at all
		wantBad   error // rank 1's AllReduce error
		wantOther error // the others' first error
	}{
		{name: "kernel-failed-before-copy-in", spoil: func(t *testing.T, be *failBack, _ *tensor.Tensor) { breakDevice(t, be.Backend) },
			wantBad: comm.ErrInvalid, wantOther: comm.ErrAborted},
		{name: "freed-input", spoil: func(t *testing.T, _ *failBack, x *tensor.Tensor) { require.NoError(t, x.Free()) },
			wantBad: comm.ErrInvalid, wantOther: comm.ErrAborted},
		{name: "copy-back-fails", spoil: func(t *testing.T, be *failBack, _ *tensor.Tensor) { be.armed.Store(true) },
			wantBad: comm.ErrInvalid, wantOther: comm.ErrAborted},
		{name: "absent", absent: true, wantOther: comm.ErrTimeout},
	}
	for _, n := range []int{2, 4} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("n=%d/%s", n, tc.name), func(t *testing.T) {
				w, err := local.NewWorld(n, local.Options{Timeout: faultTimeout})
				require.NoError(t, err)
				defer w.Close()
				bes := make([]*failBack, n)
				for r := range n {
					bes[r] = &failBack{Backend: newSim(t, r)}
				}
				begin := time.Now()
				errs := onAll(n, func(r int) error {
					if r == bad && tc.absent {
						return nil
					}
					c := staged.New(w.Comm(r), bes[r])
					defer c.Close()
					e := &env{t: t, be: bes[r], host: newCPU(t), rank: r}
					defer e.free()
					x := e.tensor(tensor.Float32, m)
					if r == bad {
						tc.spoil(t, bes[r], x)
					}
					ctx := context.Background()
					if err := c.AllReduce(ctx, x, comm.Sum); err != nil {
						return err
					}
					if r == bad {
						return errors.New("rank 1's AllReduce succeeded")
					}
					// the copy back failed after every rank's AllReduce
					// succeeded: the group fails at the next call
					return c.Barrier(ctx)
				})
				assert.Less(t, time.Since(begin), faultTimeout+time.Second, "the others waited past the deadline")
				for r, err := range errs {
					if r == bad {
						if tc.absent {
							continue
						}
						require.ErrorIs(t, err, tc.wantBad, "rank %d", r)
						var ce *comm.Error
						require.ErrorAs(t, err, &ce, "rank %d", r)
						assert.Equal(t, bad, ce.Rank)
						continue
					}
					require.ErrorIs(t, err, tc.wantOther, "rank %d", r)
					var ce *comm.Error
					require.ErrorAs(t, err, &ce, "rank %d", r)
					assert.Contains(t, ce.Ranks, bad, "rank %d: %v", r, err)
				}
			})
		}
	}
}

// TestBrokenHandleFailsLaterCalls: after a failed copy back, the rank's
// later calls fail at once with ErrAborted wrapping that failure, and the
// others fail naming it.
func TestBrokenHandleFailsLaterCalls(t *testing.T) {
	w, err := local.NewWorld(2, local.Options{Timeout: faultTimeout})
	require.NoError(t, err)
	defer w.Close()
	fb := &failBack{Backend: newSim(t, 1)}
	b0 := newSim(t, 0)
	errs := onAll(2, func(r int) error {
		ctx := context.Background()
		be := map[bool]interface {
			Empty(tensor.DType, ...int) (*tensor.Tensor, error)
		}{true: fb, false: b0}[r == 1]
		x, err := be.Empty(tensor.Float32, m)
		require.NoError(t, err)
		defer x.Free()
		var c *staged.Comm
		if r == 1 {
			c = staged.New(w.Comm(r), fb)
			fb.armed.Store(true)
		} else {
			c = staged.New(w.Comm(r), b0)
		}
		defer c.Close()
		first := c.AllReduce(ctx, x, comm.Sum)
		if r == 1 {
			require.ErrorIs(t, first, comm.ErrInvalid)
			assert.ErrorContains(t, first, "injected")
		} else {
			require.NoError(t, first)
		}
		sub, err := c.Split(ctx, 0, r, "")
		if r == 1 {
			require.ErrorIs(t, err, comm.ErrAborted)
			assert.ErrorContains(t, err, "injected")
			assert.Nil(t, sub)
		}
		return err
	})
	var ce *comm.Error
	require.ErrorAs(t, errs[0], &ce)
	assert.Contains(t, ce.Ranks, 1, "%v", errs[0])
}

// TestRunRankErrorFailsOthers: under local.Run, a rank that returns an
// error makes the others' staged operations fail naming it.
func TestRunRankErrorFailsOthers(t *testing.T) {
	bes := []*sim.Backend{newSim(t, 0), newSim(t, 1), newSim(t, 2), newSim(t, 3)}
	others := make([]error, len(bes))
	err := local.Run(context.Background(), len(bes), local.Options{Timeout: faultTimeout}, func(ctx context.Context, ic comm.Comm) error {
		r := ic.Rank()
		if r == 2 {
			return errors.New("rank 2 gave up")
		}
		c := staged.New(ic, bes[r])
		defer c.Close()
		x, err := bes[r].Empty(tensor.Float32, m)
		if err != nil {
			return err
		}
		defer x.Free()
		others[r] = c.AllReduce(ctx, x, comm.Sum)
		return nil
	})
	require.ErrorContains(t, err, "rank 2 gave up")
	for r, e := range others {
		if r == 2 {
			continue
		}
		var ce *comm.Error
		require.ErrorAs(t, e, &ce, "rank %d", r)
		assert.Contains(t, ce.Ranks, 2, "rank %d: %v", r, e)
	}
}
