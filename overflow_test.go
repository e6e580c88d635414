package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOverflow: inf gradients on one rank make every rank skip the step;
// the loss scale after each step is the one DeepSpeed's rules give
// (dsLossScales, computed here from the rules, not by optim's scaler), the
// parameters stay unchanged and the skipped steps are counted. The default
// window (1000) only lowers the scale; a window of 2 also grows it and
// refills the hysteresis, where the rule changed between DeepSpeed
// versions.
func TestOverflow(t *testing.T) {
	overflowAt := map[int]bool{3: true, 4: true, 5: true, 9: true}
	const steps = 12
	pattern := make([]bool, steps)
	for s := range pattern {
		pattern[s] = overflowAt[s]
	}
	for _, window := range []int{1000, 2} {
		for _, stage := range []int{0, 1, 2, 3} {
			t.Run(fmt.Sprintf("window%d/stage%d", window, stage), func(t *testing.T) {
				var before, after [2]map[string][]float32
				var applied [2][]bool
				r := run{stage: stage, world: 2, gas: 1, precision: "fp16", steps: steps}
				if window != 1000 {
					r.fp16Extra = fmt.Sprintf(`, "loss_scale_window": %d`, window)
				}
				r.hook = func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) {
					if rank == 1 {
						m.Layers[1].InjectInf = func() bool { return overflowAt[step] }
					}
					if step == 4 || step == 5 {
						// snapshots around skipped step 4 (Parameters is a collective)
						p, err := e.Parameters(context.Background())
						assert.NoError(t, err) // a rank goroutine: no require here
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
				require.NoError(t, err)
				assert.Equal(t, len(overflowAt), res.skipped, "skipped steps")
				for rank := range 2 {
					d, where := relDiff(before[rank], after[rank])
					assert.Zero(t, d, "rank %d: parameters changed by a skipped step (at %s)", rank, where)
					for s, a := range applied[rank] {
						assert.NotEqual(t, overflowAt[s], a, "rank %d step %d: WasStepApplied %v with overflow %v", rank, s, a, overflowAt[s])
					}
				}
				// fp16 without ZeRO is DeepSpeed's FP16_Optimizer: no hysteresis
				want, errAt := dsLossScales(pattern, dsScalerRules{init: 256, window: window, hysteresis: 2, minScale: 1, zero: stage > 0, raiseAtMin: true})
				require.Negative(t, errAt, "the pattern reaches the minimum scale at step %d: pick another", errAt)
				assert.Equal(t, want, res.scales, "loss scale after each step (DeepSpeed's rules)")
				t.Logf("scales %v", res.scales)
			})
		}
	}
}

// dsScalerRules are the inputs of DeepSpeed's dynamic loss scaler: fp16's
// 2^initial_scale_power, loss_scale_window, hysteresis,
// consecutive_hysteresis and min_loss_scale; zero picks the ZeRO scaler
// (DynamicLossScaler) over fp16 without ZeRO (FP16_Optimizer).
type dsScalerRules struct {
	init        float64
	window      int
	hysteresis  int
	consecutive bool
	minScale    float64
	zero        bool
	raiseAtMin  bool // raise_error_at_min_scale, always true in DeepSpeed's ZeRO
}

// dsLossScales is the loss scale after each update of DeepSpeed's dynamic
// loss scaler for the overflow sequence (deepspeedai 0.19;
// ../shared/reference/deepspeed.md §2.1-2.2), and the index of the update
// that raises at the minimum scale (-1 if none; scales end before it).
// ZeRO: an overflow burns one hysteresis and lowers the scale only when
// none is left (or hysteresis is 1), raising (raiseAtMin) when the scale is
// already at the minimum; FP16_Optimizer halves at once and never raises. A clean
// update grows the scale when stable = iter - lastOverflow - 1 is a
// positive multiple of the window, refilling the hysteresis (every clean
// update with consecutive_hysteresis).
func dsLossScales(overflow []bool, r dsScalerRules) ([]float64, int) {
	scale, hyst, lastOverflow := r.init, r.hysteresis, -1
	var out []float64
	for it, of := range overflow {
		if of {
			switch {
			case r.zero && r.hysteresis != 1 && hyst != 1:
				hyst--
			case r.zero && r.raiseAtMin && scale == r.minScale:
				return out, it
			default:
				scale = math.Max(scale/2, r.minScale)
			}
			lastOverflow = it
		} else {
			if r.consecutive {
				hyst = r.hysteresis
			}
			if stable := it - lastOverflow - 1; stable > 0 && stable%r.window == 0 {
				hyst = r.hysteresis
				scale *= 2
			}
		}
		out = append(out, scale)
	}
	return out, -1
}

// TestDSLossScalesGolden checks dsLossScales, TestOverflow's expectation,
// against DeepSpeed's own outputs for every golden loss-scaler record.
func TestDSLossScalesGolden(t *testing.T) {
	n := 0
	for _, file := range []string{"loss_scaler.deepspeedai.jsonl", "loss_scaler.fp16_optimizer.jsonl"} {
		for _, g := range shareddata.ReadGolden[shareddata.LossScalerRecord](t, file) {
			p := g.Params
			pattern := make([]bool, len(g.Overflow))
			for i, c := range g.Overflow {
				pattern[i] = c == '1'
			}
			got, errAt := dsLossScales(pattern, dsScalerRules{init: p.InitScale, window: p.ScaleWindow, hysteresis: p.DelayedShift,
				consecutive: p.ConsecutiveHysteresis, minScale: p.MinScale, zero: file == "loss_scaler.deepspeedai.jsonl",
				raiseAtMin: p.RaiseErrorAtMinScale})
			wantErr := -1
			if g.Error != nil {
				wantErr = g.Error.AtIndex
			}
			assert.True(t, slices.Equal(got, g.ScaleAfter), "%s %s: scales %v differ from DeepSpeed's %v", file, g.Name, got, g.ScaleAfter)
			assert.Equal(t, wantErr, errAt, "%s %s: raises at", file, g.Name)

			n++
		}
	}
	t.Logf("checked %d golden records", n)
}
