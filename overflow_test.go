package deepgo_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/optim"
)

// TestOverflow: inf gradients on one rank make every rank skip the step;
// the loss scale follows DeepSpeed's ZeRO loss-scaler rules (optim's
// DynamicScaler, golden-tested), the parameters stay unchanged and the
// skipped steps are counted.
func TestOverflow(t *testing.T) {
	overflowAt := map[int]bool{3: true, 4: true, 5: true, 9: true}
	for _, stage := range []int{0, 1, 2, 3} {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			var before, after [2]map[string][]float32
			var applied [2][]bool
			r := run{stage: stage, world: 2, gas: 1, precision: "fp16", steps: 12}
			r.hook = func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) {
				if rank == 1 {
					m.Layers[1].InjectInf = func() bool { return overflowAt[step] }
				}
				if step == 4 || step == 5 {
					// snapshots around skipped step 4 (Parameters is a collective)
					p, err := e.Parameters(context.Background())
					if err != nil {
						t.Error(err)
					}
					if step == 4 {
						before[rank] = p
					} else {
						after[rank] = p
					}
				}
				if step > 0 {
					applied[rank] = append(applied[rank], e.WasStepApplied())
				}
			}
			res, err := train(t, r)
			if err != nil {
				t.Fatal(err)
			}
			if res.skipped != len(overflowAt) {
				t.Errorf("skipped %d steps, want %d", res.skipped, len(overflowAt))
			}
			for rank := range 2 {
				if d, where := relDiff(before[rank], after[rank]); d != 0 {
					t.Errorf("rank %d: parameters changed by a skipped step (%g at %s)", rank, d, where)
				}
				for s, a := range applied[rank] {
					if a == overflowAt[s] {
						t.Errorf("rank %d step %d: WasStepApplied %v with overflow %v", rank, s, a, overflowAt[s])
					}
				}
			}
			// golden rules: replay the overflow sequence on a fresh scaler
			mode := optim.ScalerModeZeRO
			if stage == 0 {
				mode = optim.ScalerModeFP16Optimizer
			}
			want, _ := optim.NewDynamicScaler(optim.DynamicScalerConfig{InitScale: 256, ScaleWindow: 1000, MinScale: 1, DelayedShift: 2, RaiseErrorAtMin: stage > 0, Mode: mode})
			for s := range r.steps {
				if err := want.Update(overflowAt[s]); err != nil {
					t.Fatal(err)
				}
				if res.scales[s] != want.Scale() {
					t.Errorf("step %d: loss scale %v, golden %v", s, res.scales[s], want.Scale())
				}
			}
			t.Logf("scales %v", res.scales)
		})
	}
}
