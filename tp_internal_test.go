package deepgo

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/stretchr/testify/require"
)

// Each TP rank checks only its shards' gradients for overflow: one rank's
// overflow must skip the step on every rank of the group (otherwise the
// others step alone and the replicas diverge). The GPT tests cannot show
// it: a loss-scale overflow reaches the replicated residual stream and so
// every rank at once.
func TestTensorParallelOverflowAgreement(t *testing.T) {
	for _, tc := range []struct {
		bad  []bool
		want bool
	}{
		{[]bool{false, false, false, false}, false},
		{[]bool{false, false, true, false}, true},
		{[]bool{true, true, true, true}, true},
	} {
		err := local.Run(context.Background(), len(tc.bad), local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
			e := &Engine{tp: c}
			got, err := e.tpOverflow(ctx, tc.bad[c.Rank()])
			if err != nil {
				return err
			}
			if got != tc.want {
				return fmt.Errorf("rank %d of %v: overflow %v, want %v", c.Rank(), tc.bad, got, tc.want)
			}
			return nil
		})
		require.NoError(t, err)
	}
}
