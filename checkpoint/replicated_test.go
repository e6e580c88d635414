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
