package checkpoint

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// TestReadParamTPSplit: a fused q/k/v weight [6, 2] saved as two
// tensor-parallel shards (each its rows of q, then k, then v) reads back
// whole, through ReadParam and Consolidate alike.
func TestReadParamTPSplit(t *testing.T) {
	full := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	shards := [][]float32{{0, 1, 4, 5, 8, 9}, {2, 3, 6, 7, 10, 11}} // rows 0, 2, 4 and 1, 3, 5
	st := &State{Step: 1, Topology: map[string]int{"data": 1, "model": 2}}
	ref := ParamRef{Name: "attn.c_attn.weight", Shape: []int{6, 2}, Split: &TPSplit{Dim: 0, Parts: 3}}
	for r, v := range shards {
		x, err := tensor.FromFloat32(v, len(v))
		require.NoError(t, err)
		defer x.Free()
		name := []string{"mp0", "mp1"}[r]
		st.Tensors = append(st.Tensors, Entry{Name: name, Data: x})
		ref.Split.Shards = append(ref.Split.Shards, ShardRef{Source: name})
	}
	st.Params = []ParamRef{ref}
	dir := t.TempDir()
	cs := newWorld(t, 1, 10*time.Second)
	mustAll(t, onAll(cs, func(_ int, c comm.Comm) error {
		_, err := Save(context.Background(), Options{Dir: dir, Comm: c}, st)
		return err
	}))
	ck, err := Open(nil, dir, "")
	require.NoError(t, err)
	defer ck.Close()
	got, err := ck.ReadParam(context.Background(), ck.Manifest.Params[0])
	require.NoError(t, err)
	defer got.Free()
	v, _ := got.Float32s()
	require.Equal(t, full, v)
	require.Equal(t, []int{6, 2}, got.Shape())

	renamed, err := ref.WithSources(func(s string) (string, error) { return s + "/x", nil })
	require.NoError(t, err)
	require.Equal(t, "mp1/x", renamed.Split.Shards[1].Source)
	require.Equal(t, "mp1", ref.Split.Shards[1].Source, "WithSources changed its receiver's shards")
}

// TestValidParamTPSplit: a manifest's split parameter must fit its shape
// and sources.
func TestValidParamTPSplit(t *testing.T) {
	idx := map[string]*Global{"a": {Name: "a", Numel: 6}, "b": {Name: "b", Numel: 6}}
	shards := []ShardRef{{Source: "a"}, {Source: "b"}}
	for _, c := range []struct {
		name string
		p    ParamRef
		want string
	}{
		{"ok", ParamRef{Name: "w", Shape: []int{6, 2}, Split: &TPSplit{Parts: 3, Shards: shards}}, ""},
		{"source too", ParamRef{Name: "w", Shape: []int{6, 2}, Source: "a", Split: &TPSplit{Shards: shards}}, `param "w": source "a", offset 0 given with tp_split`},
		{"no shards", ParamRef{Name: "w", Shape: []int{6, 2}, Split: &TPSplit{}}, "tp_split has no shards"},
		{"parts", ParamRef{Name: "w", Shape: []int{4, 3}, Split: &TPSplit{Parts: 3, Shards: shards}}, "does not split into 3 part(s) over 2 ranks"},
		{"dim", ParamRef{Name: "w", Shape: []int{6, 2}, Split: &TPSplit{Dim: 2, Shards: shards}}, "no such dimension"},
		{"missing source", ParamRef{Name: "w", Shape: []int{6, 2}, Split: &TPSplit{Shards: []ShardRef{{Source: "a"}, {Source: "c"}}}}, `source tensor "c" is not in the checkpoint`},
		{"outside", ParamRef{Name: "w", Shape: []int{6, 2}, Split: &TPSplit{Shards: []ShardRef{{Source: "a"}, {Source: "b", Offset: 1}}}}, `elements [1, 7) outside "b"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := validParam(c.p, idx)
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.want)
		})
	}
	require.True(t, slices.Equal(ParamRef{Source: "s", Offset: 3}.Pieces(), []ShardRef{{Source: "s", Offset: 3}}))
}
