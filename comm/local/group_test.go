package local

import (
	"fmt"
	"slices"
	"testing"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// TestGridGroups builds every axis's groups of a 2x2x2 pipe/data/model
// grid over an 8-rank world and runs collectives and p2p on them.
func TestGridGroups(t *testing.T) {
	grid, err := comm.PipeModelDataGrid(2, 2, 2)
	require.NoError(t, err)
	w := newWorld(t, 8, testTimeout)
	for _, axes := range [][]string{{comm.AxisPipe}, {comm.AxisData}, {comm.AxisModel}, {comm.AxisData, comm.AxisModel}} {
		t.Run(fmt.Sprint(axes), func(t *testing.T) {
			want, _ := grid.Groups(axes...)
			mustAll(t, w.Comms(), func(world comm.Comm) error {
				me := world.Rank()
				g, err := grid.Group(ctxBG, world, axes...)
				if err != nil {
					return err
				}
				var members []int
				for _, m := range want {
					if slices.Contains(m, me) {
						members = m
					}
				}
				if fmt.Sprint(g.Members()) != fmt.Sprint(members) || g.Members()[g.Rank()] != me {
					return fmt.Errorf("group %s: members %v rank %d, want %v", g.Name(), g.Members(), g.Rank(), members)
				}
				if g.Name() != grid.GroupName(me, axes...) {
					return fmt.Errorf("name %q, want %q", g.Name(), grid.GroupName(me, axes...))
				}
				// AllReduce the world ranks: every member gets their sum.
				x, _ := tensor.Empty(tensor.Float32, 3)
				defer x.Free()
				xs, _ := x.Float32s()
				for i := range xs {
					xs[i] = float32(me * (i + 1))
				}
				if err := g.AllReduce(ctxBG, x, comm.Sum); err != nil {
					return err
				}
				sum := 0
				for _, m := range members {
					sum += m
				}
				if xs[2] != float32(3*sum) {
					return fmt.Errorf("group %s AllReduce: %v, want %d", g.Name(), xs, 3*sum)
				}
				// AllGather the world ranks into one flat buffer.
				one, _ := tensor.Empty(tensor.Int64, 1)
				defer one.Free()
				all, _ := tensor.Empty(tensor.Int64, g.Size())
				defer all.Free()
				v, _ := one.Int64s()
				v[0] = int64(me)
				if err := g.AllGather(ctxBG, all, one); err != nil {
					return err
				}
				if got, _ := all.Int64s(); fmt.Sprint(got) != fmt.Sprint(members) {
					return fmt.Errorf("group %s AllGather: %v, want %v", g.Name(), got, members)
				}
				// Pass the world rank to the next group rank, around the ring.
				n := g.Size()
				work := g.SendAsync(ctxBG, one, (g.Rank()+1)%n)
				in, _ := tensor.Empty(tensor.Int64, 1)
				defer in.Free()
				if err := g.Recv(ctxBG, in, (g.Rank()+n-1)%n); err != nil {
					return err
				}
				if err := work.Wait(ctxBG); err != nil {
					return err
				}
				if got, _ := in.Int64s(); got[0] != int64(members[(g.Rank()+n-1)%n]) {
					return fmt.Errorf("group %s Recv: %d", g.Name(), got[0])
				}
				return g.Barrier(ctxBG)
			})
		})
	}
}

func TestNewSubgroup(t *testing.T) {
	w := newWorld(t, 5, testTimeout)
	ranks := []int{4, 1, 3}
	mustAll(t, w.Comms(), func(world comm.Comm) error {
		g, err := comm.NewSubgroup(ctxBG, world, ranks)
		if err != nil {
			return err
		}
		in := slices.Contains(ranks, world.Rank())
		if (g != nil) != in {
			return fmt.Errorf("rank %d: member %v, got group %v", world.Rank(), in, g)
		}
		if g == nil {
			return world.Barrier(ctxBG)
		}
		if fmt.Sprint(g.Members()) != fmt.Sprint(ranks) || ranks[g.Rank()] != world.Rank() {
			return fmt.Errorf("members %v rank %d", g.Members(), g.Rank())
		}
		x, _ := tensor.Empty(tensor.Int32, 1)
		defer x.Free()
		v, _ := x.Int32s()
		v[0] = int32(world.Rank())
		if err := g.Broadcast(ctxBG, x, 0); err != nil {
			return err
		}
		if v[0] != 4 {
			return fmt.Errorf("Broadcast from group rank 0 (world 4) gave %d", v[0])
		}
		return world.Barrier(ctxBG)
	})
}
