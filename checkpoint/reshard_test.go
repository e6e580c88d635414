package checkpoint

import (
	"context"
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanRange(t *testing.T) {
	g := &Global{Name: "v", Numel: 10, Sharded: true, Pieces: []Piece{
		{Rank: 0, Offset: 0, Length: 4}, {Rank: 1, Offset: 4, Length: 4}, {Rank: 2, Offset: 8, Length: 4},
	}}
	for _, tc := range []struct {
		off, n int64
		want   string
	}{
		{0, 12, "[{0 0 0 4} {1 0 4 4} {2 0 8 4}]"},
		{3, 2, "[{0 3 0 1} {1 0 1 1}]"},
		{9, 6, "[{2 1 0 3}]"}, // past the end reads padding
		{20, 2, "[]"},
		{-1, 2, "error"},
	} {
		spans, err := planRange(g, tc.off, tc.n)
		got := fmt.Sprint(spans)
		if spans == nil {
			got = "[]"
		}
		if err != nil {
			got = "error"
		}
		assert.Equal(t, tc.want, got, "planRange(%d, %d)", tc.off, tc.n)
	}
	gap := &Global{Name: "g", Numel: 10, Sharded: true, Pieces: []Piece{{Offset: 0, Length: 4}, {Offset: 6, Length: 4}}}
	_, err := planRange(gap, 0, 10)
	assert.Error(t, err, "a gap was not reported")
}

func TestPartition(t *testing.T) {
	for _, tc := range []struct {
		numel              int64
		world, rank, align int
		off, n             int64
	}{
		{38, 1, 0, 2, 0, 38},
		{38, 4, 3, 2, 30, 10},
		{38, 3, 1, 2, 14, 14},
		{0, 2, 1, 1, 1, 1},
	} {
		off, n := Partition(tc.numel, tc.world, tc.rank, tc.align)
		assert.Equal(t, [2]int64{tc.off, tc.n}, [2]int64{off, n}, "Partition(%d, %d, %d, %d)", tc.numel, tc.world, tc.rank, tc.align)
	}
}

// TestReshard saves from world W and reads every new rank's partition for
// world W', checking the fp32 master and the bf16 copy against the values
// the new rank would hold.
func TestReshard(t *testing.T) {
	for _, tc := range []struct{ from, to int }{{4, 1}, {4, 2}, {2, 4}, {3, 5}} {
		t.Run(fmt.Sprintf("%dto%d", tc.from, tc.to), func(t *testing.T) {
			dir := t.TempDir()
			saveWorld(t, dir, tc.from, 9, Options{})
			n := testNumel()
			for r := range tc.to {
				ck, err := Open(nil, dir, "")
				require.NoError(t, err)
				off, m := Partition(n, tc.to, r, testAlign)
				dst := mustEmpty(t, tensor.Float32, int(m))
				require.NoError(t, ck.ReadRange(context.Background(), "fp32/master", off, dst))
				want := synthState(t, r, tc.to, 9)
				a, _ := dst.Float32s()
				b, _ := want.Tensors[0].Data.Float32s()
				for i := range a {
					if a[i] != b[i] {
						require.Failf(t, "resharded element differs", "new rank %d element %d: %v, want %v", r, i, a[i], b[i])
					}
				}
				// The bf16 copy holds each master value rounded to nearest
				// even, and zero in the padding, bit for bit.
				bf := mustEmpty(t, tensor.BFloat16, int(m))
				require.NoError(t, ck.ReadRange(context.Background(), "bf16/params", off, bf))
				h, _ := bf.Uint16s()
				for i := range h {
					if w := tensor.Float32ToBFloat16(b[i]); h[i] != w {
						require.Failf(t, "resharded bf16 element differs", "new rank %d bf16 element %d: %#04x, want %#04x (%v rounded)", r, i, h[i], w, b[i])
					}
				}
				dst.Free()
				bf.Free()
				ck.Close()
			}
		})
	}
}
