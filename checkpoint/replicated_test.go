package checkpoint

import (
	"context"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

func TestVerifyReplicated(t *testing.T) {
	cs := newWorld(t, 4, 10*time.Second)
	errs := onAll(cs, func(r int, c comm.Comm) error {
		a, _ := tensor.FromFloat32([]float32{1, 2, 3})
		b, _ := tensor.FromFloat32([]float32{4, 5})
		defer a.Free()
		defer b.Free()
		if err := VerifyReplicated(context.Background(), c, []Named{{"a", a}, {"b", b}}); err != nil {
			return err
		}
		if r == 1 || r == 3 {
			v, _ := b.Float32s()
			v[1] = 5.0000005
		}
		return VerifyReplicated(context.Background(), c, []Named{{"a", a}, {"b", b}})
	})
	for r, err := range errs {
		var me *ReplicaMismatchError
		require.ErrorAs(t, err, &me, "rank %d", r)
		require.Equal(t, "b", me.Tensor, "rank %d: %v", r, err)
		require.Equal(t, []int{1, 3}, me.Ranks, "rank %d: %v", r, err)
	}
	t.Log(errs[0])
}

// A rank that cannot hash its copy (freed here) still takes part: it
// reports its own error, the others name it, and nobody waits for it (the
// group's timeout is 10 s).
func TestVerifyReplicatedHashFailure(t *testing.T) {
	cs := newWorld(t, 3, 10*time.Second)
	start := time.Now()
	errs := onAll(cs, func(r int, c comm.Comm) error {
		a, _ := tensor.FromFloat32([]float32{1, 2, 3})
		b, _ := tensor.FromFloat32([]float32{4, 5})
		defer a.Free()
		if r == 2 {
			b.Free()
		} else {
			defer b.Free()
		}
		return VerifyReplicated(context.Background(), c, []Named{{"a", a}, {"b", b}})
	})
	require.Less(t, time.Since(start), 5*time.Second)
	require.ErrorContains(t, errs[2], `checkpoint: hashing "b"`)
	for _, r := range []int{0, 1} {
		require.ErrorContains(t, errs[r], "rank(s) [2] could not hash theirs", "rank %d", r)
	}
}
