package deepgo_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/require"
)

// CPU optimizer offload on the simulated device copies each unit's reduced
// gradient chunk down as it becomes final in the boundary micro-step
// (ZeRO-Offload): after that micro-step's Backward, before Step, every
// owned chunk's download has started (stages 2-3 as their reductions
// finish, stages 0-1 of one rank when backward ends), none in the other
// micro-steps; stages 0-1 of two ranks start each one as the boundary
// reduction in Step finishes it. Training with 4 accumulated micro-steps
// stays bit-identical to the CPU backend without offload.
func TestOffloadGradDownloadsOverlapBackward(t *testing.T) {
	const steps, gas = 3, 4
	for _, stage := range []int{1, 2, 3} {
		for _, world := range []int{1, 2} {
			base := run{stage: stage, world: world, gas: gas, steps: steps, precision: "bf16"}
			t.Run(base.String(), func(t *testing.T) {
				want, err := train(t, base)
				require.NoError(t, err)
				off := base
				off.zeroExtra = `, "offload_optimizer": {"device": "cpu", "pin_memory": true}, "sub_group_size": 50`
				inBackward := stage >= 2 || world == 1
				var mu sync.Mutex
				got := map[string][]float32{}
				err = worldFor("sim+delay")(context.Background(), world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
					cfg, err := config.Parse([]byte(off.config()))
					if err != nil {
						return err
					}
					data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
					e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), opts...)
					if err != nil {
						return err
					}
					defer e.Close()
					z := e.ZeRO()
					owned := int64(0)
					for u := range z.Layout().Units {
						if _, n := z.Own(u); n > 0 {
							owned++
						}
					}
					for s := range steps {
						for i, mb := range data.RankBatch(s, globalBatch, world, c.Rank(), gas) {
							before := z.GradDownloads()
							if _, err := e.Forward(ctx, mb); err != nil {
								return err
							}
							if err := e.Backward(ctx); err != nil {
								return err
							}
							want := before
							if i == gas-1 && inBackward {
								want.Started += owned
								want.Early += owned
							}
							if got := z.GradDownloads(); got != want {
								return fmt.Errorf("step %d micro-step %d: after Backward %+v, want %+v", s, i, got, want)
							}
							if err := e.Step(ctx); err != nil {
								return err
							}
						}
						want := zero.GradDownloads{Started: int64(s+1) * owned, Early: int64(s+1) * owned}
						if got := z.GradDownloads(); got != want {
							return fmt.Errorf("step %d: after Step %+v, want %+v", s, got, want)
						}
					}
					p, err := e.Parameters(ctx)
					if err != nil || c.Rank() != 0 {
						return err
					}
					mu.Lock()
					got = p
					mu.Unlock()
					return nil
				})
				require.NoError(t, err)
				require.NoError(t, bitEqual(want.params, got))
			})
		}
	}
}
