package comm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is an Interposer that passes the tensors through and records
// what each operation declared.
type recorder struct {
	mu  sync.Mutex
	ops []string
}

func (r *recorder) Start(ctx context.Context, op comm.OpKind, args []comm.Arg, run func(context.Context, []*tensor.Tensor) comm.Work) comm.Work {
	s := op.String()
	ts := make([]*tensor.Tensor, len(args))
	for i, a := range args {
		s += fmt.Sprintf(" %s:%s", a.Name, map[[2]bool]string{{true, false}: "in", {false, true}: "out", {true, true}: "inout"}[[2]bool{a.In, a.Out}])
		ts[i] = a.T
	}
	r.mu.Lock()
	r.ops = append(r.ops, s)
	r.mu.Unlock()
	return run(ctx, ts)
}

// Interposed sends every operation through its Interposer with each
// tensor's direction on this rank (Broadcast's and Reduce's depend on the
// root), reaches the inner comm with the results, and wraps Split's groups.
func TestInterposed(t *testing.T) {
	recs := [2]*recorder{{}, {}}
	err := local.Run(context.Background(), 2, local.Options{Timeout: 5 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		r := c.Rank()
		ic := &comm.Interposed{Inner: c, IP: recs[r]}
		wrapped := 0
		ic.Wrap = func(sub comm.Comm) comm.Comm { wrapped++; return &comm.Interposed{Inner: sub, IP: recs[r]} }
		x, _ := tensor.FromFloat32([]float32{float32(r + 1), 1})
		defer x.Free()
		all, _ := tensor.Empty(tensor.Float32, 4)
		defer all.Free()
		one, _ := tensor.Empty(tensor.Float32, 1)
		defer one.Free()
		y, _ := tensor.Empty(tensor.Float32, 2)
		defer y.Free()
		steps := []func() error{
			func() error { return ic.AllReduce(ctx, x, comm.Sum) }, // x = [3, 2]
			func() error { return ic.AllGather(ctx, all, x) },
			func() error { return ic.ReduceScatter(ctx, one, x, comm.Sum) },
			func() error { return ic.Broadcast(ctx, x, 0) },
			func() error { return ic.Reduce(ctx, x, 1, comm.Max) },
			func() error { return ic.AllToAll(ctx, y, x) },
			func() error { return ic.Barrier(ctx) },
			func() error {
				if r == 0 {
					return ic.Send(ctx, x, 1)
				}
				return ic.Recv(ctx, x, 0)
			},
			func() error {
				sub, err := ic.Split(ctx, 0, r, "sub")
				if err != nil {
					return err
				}
				return sub.Barrier(ctx)
			},
		}
		for _, f := range steps {
			if err := f(); err != nil {
				return err
			}
		}
		if wrapped != 1 {
			return fmt.Errorf("rank %d: Split wrapped %d groups", r, wrapped)
		}
		v, _ := all.Float32s()
		if r == 1 && (v[0] != 3 || v[3] != 2) {
			return fmt.Errorf("rank %d: all-gather of the all-reduced x: %v", r, v)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"AllReduce t:inout", "AllGather dst:out src:in", "ReduceScatter dst:out src:in",
		"Broadcast t:in", "Reduce t:in", "AllToAll dst:out src:in", "Barrier", "Send t:in", "Split", "Barrier"}, recs[0].ops, "rank 0")
	assert.Equal(t, []string{"AllReduce t:inout", "AllGather dst:out src:in", "ReduceScatter dst:out src:in",
		"Broadcast t:out", "Reduce t:inout", "AllToAll dst:out src:in", "Barrier", "Recv t:out", "Split", "Barrier"}, recs[1].ops, "rank 1")
}
