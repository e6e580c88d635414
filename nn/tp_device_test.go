package nn_test

import (
	"context"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/stretchr/testify/require"
)

// A TP or Ulysses GPT computing on a device over a group of host memory
// (comm/local ranks, no engine to wrap them) is refused before any layer
// hands the comm a device tensor, naming the device and what to do.
func TestGPTModelParallelHostCommOnDevice(t *testing.T) {
	for _, tc := range []struct {
		what string
		cfg  func(c comm.Comm) nn.GPTConfig
	}{
		{"tensor parallelism", func(c comm.Comm) nn.GPTConfig { g := tpGPT(32); g.TP = nn.TP{Comm: c}; return g }},
		{"sequence parallelism", func(c comm.Comm) nn.GPTConfig { g := tpGPT(32); g.SP = nn.SP{Comm: c}; return g }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			err := local.Run(context.Background(), 2, local.Options{Timeout: 10 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
				be, err := sim.NewBackend(c.Rank(), sim.Options{Threads: 1})
				if err != nil {
					return err
				}
				defer be.Close()
				g, err := nn.NewReadyGPT(tc.cfg(c), be, eqSeed)
				if err != nil {
					return err
				}
				defer g.Free()
				_, err = g.Forward(nil, make([]int32, 8), make([]int32, 8), 2, 4)
				require.ErrorIs(t, err, backend.ErrUnsupported)
				require.ErrorContains(t, err, tc.what+" on sim:")
				require.ErrorContains(t, err, "over a comm of host memory")
				return nil
			})
			require.NoError(t, err)
		})
	}
}
