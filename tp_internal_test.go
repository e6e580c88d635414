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

// Each TP rank's copy of a saved tensor gets its own name, one that still
// maps from a master unit to its optimizer state (stateSource).
func TestTPTensorName(t *testing.T) {
	for _, c := range []struct {
		name string
		t    int
		want string
	}{
		{"fp32/unit3", 0, "fp32/mp_rank_00/unit3"},
		{"fp32/unit0", 11, "fp32/mp_rank_11/unit0"},
		{"optim/exp_avg/unit3", 1, "optim/exp_avg/mp_rank_01/unit3"},
	} {
		require.Equal(t, c.want, tpTensorName(c.name, c.t))
	}
	st, ok := stateSource("exp_avg", tpTensorName(masterName(3), 1))
	require.True(t, ok)
	require.Equal(t, tpTensorName("optim/exp_avg/unit3", 1), st)
}
