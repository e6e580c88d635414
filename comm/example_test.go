package comm_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Four in-process ranks average a gradient.
func ExampleComm_AllReduce() {
	err := local.Run(context.Background(), 4, local.Options{}, func(ctx context.Context, c comm.Comm) error {
		g, err := tensor.FromFloat32([]float32{float32(c.Rank()), 1})
		if err != nil {
			return err
		}
		defer g.Free()
		if err := c.AllReduce(ctx, g, comm.Avg); err != nil {
			return err
		}
		if c.Rank() == 0 {
			v, _ := g.Float32s()
			fmt.Println(v)
		}
		return nil
	})
	fmt.Println(err)
	// Output:
	// [1.5 1]
	// <nil>
}

// ZeRO's partitioned all-gather: each rank owns one shard of a flat buffer
// and gathers the others' in place.
func ExampleComm_AllGather() {
	const n, shard = 2, 3
	err := local.Run(context.Background(), n, local.Options{}, func(ctx context.Context, c comm.Comm) error {
		flat, err := tensor.Empty(tensor.Float32, n*shard)
		if err != nil {
			return err
		}
		defer flat.Free()
		mine, _ := flat.Slice(c.Rank()*shard, shard)
		v, _ := mine.Float32s()
		for i := range v {
			v[i] = float32(10*c.Rank() + i)
		}
		if err := c.AllGather(ctx, flat, mine); err != nil {
			return err
		}
		if c.Rank() == 1 {
			all, _ := flat.Float32s()
			fmt.Println(all)
		}
		return nil
	})
	fmt.Println(err)
	// Output:
	// [0 1 2 10 11 12]
	// <nil>
}

// A 2x2x2 pipe/data/model grid: each rank joins its data-parallel group.
func ExampleGrid_Group() {
	grid, _ := comm.PipeModelDataGrid(2, 2, 2) // pp, mp, dp
	groups, _ := grid.Groups(comm.AxisData)
	fmt.Println(groups)
	err := local.Run(context.Background(), grid.Size(), local.Options{}, func(ctx context.Context, world comm.Comm) error {
		dp, err := grid.Group(ctx, world, comm.AxisData)
		if err != nil {
			return err
		}
		if world.Rank() == 5 {
			fmt.Println(dp.Name(), dp.Members(), dp.Rank())
		}
		return nil
	})
	fmt.Println(err)
	// Output:
	// [[0 2] [1 3] [4 6] [5 7]]
	// data[pipe=1,model=1] [5 7] 0
	// <nil>
}

// A rank that never arrives: the others get a *comm.Error naming it once
// the deadline passes.
func ExampleError() {
	w, _ := local.NewWorld(2, local.Options{Timeout: 50 * time.Millisecond})
	defer w.Close()
	err := w.Comm(0).Barrier(context.Background()) // rank 1 never calls
	var ce *comm.Error
	fmt.Println(errors.Is(err, comm.ErrTimeout), errors.As(err, &ce), ce.Op, ce.Group, ce.Ranks)
	// Output:
	// true true Barrier world [1]
}
