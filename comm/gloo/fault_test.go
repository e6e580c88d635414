//go:build gloo

package gloo

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/stretchr/testify/require"
)

// TestResolve: whom a rank names when peers did not join or report its
// call, given what the others left in the store. The case CI caught: rank
// 3 died inside call 2, rank 2 stayed stuck in it on rank 3 while ranks 0
// and 1 went on to call 3, so rank 0 saw ranks 2 and 3 missing; rank 2 is
// alive (it reported call 2) and must not be named.
func TestResolve(t *testing.T) {
	srv, err := comm.ListenStore("127.0.0.1:0")
	require.NoError(t, err)
	defer srv.Close()
	ctx := context.Background()
	cases := []struct {
		name    string
		missing []int
		behind  []int         // reported the previous call
		blamed  map[int][]int // broke their group earlier, blaming these
		want    []int
		note    string
	}{
		{"nobody reported", []int{2, 3}, nil, nil, []int{2, 3}, ""},
		{"one behind", []int{2, 3}, []int{2}, nil, []int{3}, "ranks [2] are alive"},
		{"all behind", []int{2, 3}, []int{2, 3}, nil, []int{2, 3}, ""},
		{"blamed", []int{3}, nil, map[int][]int{3: {1}}, []int{1}, "rank 3 left after"},
		{"behind and blamed", []int{1, 2, 3}, []int{2}, map[int][]int{3: {0, 1}}, []int{1}, "ranks [2] are alive"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, err := comm.DialStore(ctx, srv.Addr())
			require.NoError(t, err)
			defer store.Close()
			c := &glooComm{w: &world{store: store, timeout: time.Second, storeHost: -1},
				prefix: "t" + string(rune('a'+i)), rank: 0, size: 4, members: []int{0, 1, 2, 3}}
			o := &op{c: c, id: "c3", slot: 3}
			for _, r := range tc.behind {
				require.NoError(t, store.Set(ctx, c.failedKey("c2", r), []byte{1}))
			}
			for r, ranks := range tc.blamed {
				b, _ := json.Marshal(breakReport{Ranks: ranks, Err: "boom"})
				require.NoError(t, store.Set(ctx, c.breakKey(r), b))
			}
			start := time.Now()
			got, note := o.resolve(tc.missing, 300*time.Millisecond)
			require.Equal(t, tc.want, got)
			require.Contains(t, note, tc.note)
			require.Less(t, time.Since(start), 2*time.Second)
			// the first collective has no previous one to be behind in
			o0 := &op{c: c, id: "c0", slot: 0}
			require.Empty(t, o0.prevID())
		})
	}
}
