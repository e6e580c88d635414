package comm

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Axis names DeepSpeed uses (pipe/topology.py), plus seq for sequence
// parallelism (Ulysses).
const (
	AxisPipe  = "pipe"
	AxisData  = "data"
	AxisModel = "model"
	AxisSeq   = "seq"
)

// Grid is a Cartesian layout of ranks over named axes, DeepSpeed's
// ProcessTopology: ranks enumerate coordinates in row-major order, the last
// axis varying fastest. With PipeModelDataGrid (axes pipe, data, model)
// tensor-parallel ranks are adjacent, then data-parallel, pipe outermost.
// A Grid is immutable and safe for concurrent use.
type Grid struct {
	axes []string
	dims []int
}

// NewGrid lays out prod(dims) ranks over axes (distinct, non-empty names;
// dims >= 1).
func NewGrid(axes []string, dims []int) (*Grid, error) {
	if len(axes) == 0 || len(axes) != len(dims) {
		return nil, fmt.Errorf("comm.NewGrid: %d axes and %d dims: want equally many, at least one", len(axes), len(dims))
	}
	for i, a := range axes {
		if a == "" || slices.Index(axes, a) != i {
			return nil, fmt.Errorf("comm.NewGrid: axis %d %q: names must be non-empty and distinct", i, a)
		}
		if dims[i] < 1 {
			return nil, fmt.Errorf("comm.NewGrid: axis %q has size %d: must be >= 1", a, dims[i])
		}
	}
	return &Grid{axes: slices.Clone(axes), dims: slices.Clone(dims)}, nil
}

// PipeDataGrid is DeepSpeed's PipeDataParallelTopology: axes pipe, data.
func PipeDataGrid(pp, dp int) (*Grid, error) {
	return NewGrid([]string{AxisPipe, AxisData}, []int{pp, dp})
}

// PipeModelDataGrid is DeepSpeed's PipeModelDataParallelTopology(num_pp,
// num_mp, num_dp): axes pipe, data, model (model fastest).
func PipeModelDataGrid(pp, mp, dp int) (*Grid, error) {
	return NewGrid([]string{AxisPipe, AxisData, AxisModel}, []int{pp, dp, mp})
}

// Axes returns the axis names, outermost first.
func (g *Grid) Axes() []string { return slices.Clone(g.axes) }

// Dims returns the axis sizes, in Axes order.
func (g *Grid) Dims() []int { return slices.Clone(g.dims) }

// Size is the number of ranks, the product of the dims.
func (g *Grid) Size() int {
	n := 1
	for _, d := range g.dims {
		n *= d
	}
	return n
}

// Dim is the size of axis, 0 when the grid has no such axis.
func (g *Grid) Dim(axis string) int {
	if i := slices.Index(g.axes, axis); i >= 0 {
		return g.dims[i]
	}
	return 0
}

// Rank is the rank at coord (one entry per axis, in Axes order).
func (g *Grid) Rank(coord ...int) (int, error) {
	if len(coord) != len(g.axes) {
		return 0, fmt.Errorf("comm.Grid.Rank: %d coordinates for %d axes %v", len(coord), len(g.axes), g.axes)
	}
	r := 0
	for i, c := range coord {
		if c < 0 || c >= g.dims[i] {
			return 0, fmt.Errorf("comm.Grid.Rank: %s = %d out of range [0, %d)", g.axes[i], c, g.dims[i])
		}
		r = r*g.dims[i] + c
	}
	return r, nil
}

// Coord is rank's coordinate, in Axes order. It panics when rank is out of
// range, like an index expression.
func (g *Grid) Coord(rank int) []int {
	if rank < 0 || rank >= g.Size() {
		panic(fmt.Sprintf("comm.Grid.Coord: rank %d out of range [0, %d)", rank, g.Size()))
	}
	c := make([]int, len(g.dims))
	for i := len(g.dims) - 1; i >= 0; i-- {
		c[i] = rank % g.dims[i]
		rank /= g.dims[i]
	}
	return c
}

// CoordOf is rank's coordinate along axis (-1 when there is no such axis).
func (g *Grid) CoordOf(rank int, axis string) int {
	i := slices.Index(g.axes, axis)
	if i < 0 {
		return -1
	}
	return g.Coord(rank)[i]
}

func (g *Grid) axisMask(axes []string) ([]bool, error) {
	in := make([]bool, len(g.axes))
	for _, a := range axes {
		i := slices.Index(g.axes, a)
		if i < 0 {
			return nil, fmt.Errorf("comm.Grid: no axis %q (axes %v)", a, g.axes)
		}
		in[i] = true
	}
	return in, nil
}

// groupID numbers the group of rank along the masked axes: the row-major
// index of its coordinates on the other axes.
func (g *Grid) groupID(rank int, in []bool) int {
	id := 0
	for i, c := range g.Coord(rank) {
		if !in[i] {
			id = id*g.dims[i] + c
		}
	}
	return id
}

// Groups returns the groups of ranks that differ only along axes (one axis
// is DeepSpeed's get_axis_comm_lists; several give e.g. the
// sequence-data-parallel group), each ascending, ordered by their first rank.
func (g *Grid) Groups(axes ...string) ([][]int, error) {
	in, err := g.axisMask(axes)
	if err != nil {
		return nil, err
	}
	var out [][]int
	index := map[int]int{}
	for r := range g.Size() {
		id := g.groupID(r, in)
		k, ok := index[id]
		if !ok {
			k = len(out)
			index[id] = k
			out = append(out, nil)
		}
		out[k] = append(out[k], r)
	}
	return out, nil
}

// GroupName is the name Group gives rank's group along axes, e.g.
// "data[pipe=1,model=0]": the axes joined by "+", then the fixed coordinates.
func (g *Grid) GroupName(rank int, axes ...string) string {
	in, err := g.axisMask(axes)
	if err != nil {
		return strings.Join(axes, "+")
	}
	var fixed []string
	for i, c := range g.Coord(rank) {
		if !in[i] {
			fixed = append(fixed, fmt.Sprintf("%s=%d", g.axes[i], c))
		}
	}
	return strings.Join(axes, "+") + "[" + strings.Join(fixed, ",") + "]"
}

// Neighbor is the rank delta steps along axis from rank, wrapping around
// (delta 1 on the pipe axis is the next stage, as in DeepSpeed's p2p pairs).
func (g *Grid) Neighbor(rank int, axis string, delta int) (int, error) {
	i := slices.Index(g.axes, axis)
	if i < 0 {
		return 0, fmt.Errorf("comm.Grid.Neighbor: no axis %q (axes %v)", axis, g.axes)
	}
	c := g.Coord(rank)
	c[i] = ((c[i]+delta)%g.dims[i] + g.dims[i]) % g.dims[i]
	return g.Rank(c...)
}

// Group is a collective over world (a Comm of Size() ranks laid out by g):
// every rank calls it with the same axes and gets its group of ranks that
// differ only along axes, with group ranks in ascending world-rank order.
func (g *Grid) Group(ctx context.Context, world Comm, axes ...string) (Comm, error) {
	if world.Size() != g.Size() {
		return nil, fmt.Errorf("comm.Grid.Group: grid %v has %d ranks, group %s has %d", g, g.Size(), world.Name(), world.Size())
	}
	in, err := g.axisMask(axes)
	if err != nil {
		return nil, err
	}
	r := world.Rank()
	return world.Split(ctx, g.groupID(r, in), r, g.GroupName(r, axes...))
}

// String describes the grid, e.g. "pipe=2 x data=2 x model=2".
func (g *Grid) String() string {
	parts := make([]string, len(g.axes))
	for i := range g.axes {
		parts[i] = fmt.Sprintf("%s=%d", g.axes[i], g.dims[i])
	}
	return strings.Join(parts, " x ")
}
