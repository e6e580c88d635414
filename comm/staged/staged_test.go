package staged_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/comm/staged"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// collCase is one rank's part of a collective scenario; it returns the
// tensors whose bytes must equal the CPU reference's.
type collCase struct {
	name string
	minN int
	run  func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error)
}

const m = 37 // elements per rank chunk: odd, so nothing lines up by luck

func allReduce(dt tensor.DType, op comm.ReduceOp) collCase {
	return collCase{name: fmt.Sprintf("AllReduce/%v/%v", dt, op), run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		x := e.tensor(dt, 3*m)
		return []*tensor.Tensor{x}, c.AllReduce(ctx, x, op)
	}}
}

var cases = []collCase{
	allReduce(tensor.Float32, comm.Sum),
	allReduce(tensor.BFloat16, comm.Avg),
	allReduce(tensor.Float16, comm.Min),
	allReduce(tensor.Int32, comm.Max),
	allReduce(tensor.Int64, comm.Sum),
	{name: "ReduceScatter", run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		src, dst := e.tensor(tensor.Float32, c.Size()*m), e.tensor(tensor.Float32, m)
		return []*tensor.Tensor{dst, src}, c.ReduceScatter(ctx, dst, src, comm.Sum)
	}},
	{name: "ReduceScatter/in-place", run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		src := e.tensor(tensor.Float32, c.Size()*m)
		ch, err := comm.Chunks(src, c.Size())
		if err != nil {
			return nil, err
		}
		return []*tensor.Tensor{ch[c.Rank()]}, c.ReduceScatter(ctx, ch[c.Rank()], src, comm.Avg)
	}},
	{name: "AllGather", run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		src, dst := e.tensor(tensor.Int64, m), e.tensor(tensor.Int64, c.Size()*m)
		return []*tensor.Tensor{dst, src}, c.AllGather(ctx, dst, src)
	}},
	{name: "AllGather/in-place", run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		dst := e.tensor(tensor.BFloat16, c.Size()*m)
		ch, err := comm.Chunks(dst, c.Size())
		if err != nil {
			return nil, err
		}
		return []*tensor.Tensor{dst}, c.AllGather(ctx, dst, ch[c.Rank()])
	}},
	{name: "Broadcast", run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		x := e.tensor(tensor.Float16, m)
		return []*tensor.Tensor{x}, c.Broadcast(ctx, x, c.Size()-1)
	}},
	{name: "Reduce", run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		x := e.tensor(tensor.Float32, 2*m)
		return []*tensor.Tensor{x}, c.Reduce(ctx, x, c.Size()/2, comm.Sum) // non-roots: unchanged
	}},
	{name: "AllToAll", run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		src, dst := e.tensor(tensor.Int32, c.Size()*m), e.tensor(tensor.Int32, c.Size()*m)
		return []*tensor.Tensor{dst, src}, c.AllToAll(ctx, dst, src)
	}},
	{name: "SendRecv/ring", minN: 2, run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		x, y := e.tensor(tensor.Float32, m), e.tensor(tensor.Float32, m)
		n, r := c.Size(), c.Rank()
		sw := c.SendAsync(ctx, x, (r+1)%n)
		err := c.Recv(ctx, y, (r+n-1)%n)
		return []*tensor.Tensor{y, x}, waitAll(ctx, sw, doneErr(err))
	}},
	{name: "Async/in-flight-together", run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		// distinct tensors (the ops own theirs until Wait); a, b and r of
		// one size, so that in-flight ops take separate cached buffers
		a, b, r := e.tensor(tensor.Float32, m), e.tensor(tensor.Float32, m), e.tensor(tensor.Float32, m)
		src, dst := e.tensor(tensor.Float32, c.Size()*m), e.tensor(tensor.Float32, c.Size()*m)
		g, gd := e.tensor(tensor.Float32, m), e.tensor(tensor.Float32, c.Size()*m)
		bc := e.tensor(tensor.Int32, m)
		ws := []comm.Work{
			c.AllReduceAsync(ctx, a, comm.Sum),
			c.AllReduceAsync(ctx, b, comm.Max),
			c.AllToAllAsync(ctx, dst, src),
			c.AllGatherAsync(ctx, gd, g),
			c.BarrierAsync(ctx),
			c.BroadcastAsync(ctx, bc, 0),
			c.ReduceAsync(ctx, r, 0, comm.Min),
		}
		return []*tensor.Tensor{a, b, r, dst, gd, bc}, waitAll(ctx, ws...)
	}},
	{name: "Split", run: func(ctx context.Context, c comm.Comm, e *env) ([]*tensor.Tensor, error) {
		sub, err := c.Split(ctx, c.Rank()%2, -c.Rank(), "")
		if err != nil {
			return nil, err
		}
		defer sub.Close()
		x := e.tensor(tensor.Float32, m)
		y := e.tensor(tensor.Float32, sub.Size()*m)
		if err := sub.AllReduce(ctx, x, comm.Sum); err != nil {
			return nil, err
		}
		return []*tensor.Tensor{x, y}, sub.AllGather(ctx, y, x)
	}},
}

// doneErr is a finished work reporting err.
func doneErr(err error) comm.Work {
	ch := make(chan struct{})
	close(ch)
	return finished{ch, err}
}

type finished struct {
	ch  chan struct{}
	err error
}

func (f finished) Done() <-chan struct{}      { return f.ch }
func (f finished) Wait(context.Context) error { return f.err }

// runCases runs every case on n ranks through comms, tensors made on bes
// as place says, and returns each case's output bytes by rank.
func runCases(t *testing.T, n int, comms []comm.Comm, bes []backend.Backend, place placement) map[string][][][]byte {
	got := map[string][][][]byte{}
	hosts := make([]backend.Backend, n)
	for r := range hosts {
		hosts[r] = newCPU(t)
	}
	for _, cs := range cases {
		if n < cs.minN {
			continue
		}
		got[cs.name] = make([][][]byte, n)
		errs := onAll(n, func(r int) error {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			e := &env{t: t, be: bes[r], host: hosts[r], place: place, rank: r}
			defer e.free()
			outs, err := cs.run(ctx, comms[r], e)
			if err != nil {
				return err
			}
			for _, o := range outs {
				got[cs.name][r] = append(got[cs.name][r], e.read(o))
			}
			return nil
		})
		for r, err := range errs {
			require.NoError(t, err, "%s: rank %d", cs.name, r)
		}
	}
	return got
}

// reference runs the cases on comm/local with host tensors and the CPU
// backend: the results the staged device comm must match bit for bit.
func reference(t *testing.T, n int) map[string][][][]byte {
	w, err := local.NewWorld(n, local.Options{Timeout: testTimeout})
	require.NoError(t, err)
	defer w.Close()
	bes := make([]backend.Backend, n)
	for r := range bes {
		bes[r] = newCPU(t)
	}
	return runCases(t, n, w.Comms(), bes, onHost)
}

// TestCollectivesMatchCPU: every collective over sim tensors written by
// just-queued kernels (each rank on its own device, or all ranks on one)
// gives the CPU's bits; host tensors, alone or mixed with device ones,
// pass through.
func TestCollectivesMatchCPU(t *testing.T) {
	configs := []struct {
		name   string
		shared bool
		place  placement
	}{
		{"device-per-rank", false, onDevice},
		{"one-shared-device", true, onDevice},
		{"mixed", false, mixed},
		{"host", false, onHost},
	}
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			want := reference(t, n)
			for _, cfg := range configs {
				t.Run(cfg.name, func(t *testing.T) {
					w, err := local.NewWorld(n, local.Options{Timeout: testTimeout})
					require.NoError(t, err)
					defer w.Close()
					bes := make([]backend.Backend, n)
					comms := make([]comm.Comm, n)
					for r := range n {
						switch {
						case cfg.shared && r > 0:
							bes[r] = bes[0]
						default:
							bes[r] = newSim(t, r)
						}
						comms[r] = staged.New(w.Comm(r), bes[r])
					}
					got := runCases(t, n, comms, bes, cfg.place)
					for _, cs := range cases {
						if n < cs.minN {
							continue
						}
						for r := range n {
							require.Len(t, got[cs.name][r], len(want[cs.name][r]), "%s rank %d", cs.name, r)
							for i := range want[cs.name][r] {
								assert.Equal(t, want[cs.name][r][i], got[cs.name][r][i], "%s rank %d output %d", cs.name, r, i)
							}
						}
					}
					for _, c := range comms {
						require.NoError(t, c.Close())
					}
				})
			}
		})
	}
}
