package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
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

// fp16's overflow threshold does not depend on the data-parallel size at
// ZeRO 1-3: DeepSpeed divides each rank's gradient by the world before the
// sum there (average_tensor, reduce_scatter_coalesced), so 4 ranks all
// training on the batch one rank trains on see the same overflows and
// settle at the same loss scale. At stage 0 it divides after the sum (the
// engine's all-reduce, post-scaled), which overflows at a quarter of the
// scale: 4 ranks end two halvings lower. The scale starts at 2^20 with
// hysteresis 1, so each run halves it until the gradients fit.
func TestOverflowThresholdAcrossWorlds(t *testing.T) {
	const steps, micro = 16, 4
	scales := func(dev string, stage, world int, zextra, extra string) ([]float64, int) {
		cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": 1,
			"optimizer": {"type": "AdamW", "params": {"lr": 0.002}},
			"fp16": {"enabled": true, "initial_scale_power": 20, "hysteresis": 1},
			"zero_optimization": {"stage": %d, "reduce_bucket_size": 100%s}%s}`, micro, stage, zextra, extra)
		data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
		var got []float64
		skipped := 0
		err := worldFor(dev)(context.Background(), world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
			cfg, err := config.Parse([]byte(cfgJSON))
			if err != nil {
				return err
			}
			m := testmodel.NewMLP(1, sizes...)
			e, err := initEngine(ctx, cfg, m, opts...)
			if err != nil {
				m.FreeUndonated()
				return err
			}
			defer e.Close()
			for s := range steps {
				// every rank the same batch: world 1's
				if _, err := e.TrainBatch(ctx, data.RankBatch(s, micro, 1, 0, 1)); err != nil {
					return err
				}
				if c.Rank() == 0 {
					got = append(got, e.LossScale())
				}
			}
			if c.Rank() == 0 {
				skipped = e.SkippedSteps()
			}
			return nil
		})
		require.NoError(t, err, "stage %d world %d", stage, world)
		return got, skipped
	}
	for stage := range 4 {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			one, skipOne := scales("", stage, 1, "", "")
			four, skipFour := scales("", stage, 4, "", "")
			require.Positive(t, skipOne, "the scale must start too high to test anything: %v", one)
			require.Less(t, skipOne, steps/2, "most steps must train: %v", one)
			if stage == 0 {
				assert.Equal(t, one[steps-1]/4, four[steps-1], "stage 0 sums before dividing: 4 ranks settle 4x lower (%v vs %v)", one, four)
				return
			}
			assert.Equal(t, one, four, "loss scales, 1 rank vs 4 on the same batch")
			assert.Equal(t, skipOne, skipFour, "skipped steps, 1 rank vs 4")
			t.Logf("stage %d: %d skipped, scale %g on 1 and 4 ranks", stage, skipOne, one[steps-1])
		})
	}
	// at stage 0 with fp32 communication the sum is divided in fp32
	// before the cast back to fp16 (DeepSpeed's allreduce_bucket does the
	// same), so nothing overflows that one rank does not (with reduce_scatter
	// off stage 2 divides after the sum too, in the communication dtype)
	const fp32comm = `, "communication_data_type": "fp32"`
	for _, c := range []struct {
		stage  int
		zextra string
	}{{0, ""}, {2, `, "reduce_scatter": false`}} {
		t.Run(fmt.Sprintf("stage%d-fp32comm", c.stage), func(t *testing.T) {
			one, skipOne := scales("", c.stage, 1, c.zextra, fp32comm)
			// the 4 ranks also on the simulated device: the scale before the
			// cast runs in its stream order
			for _, dev := range []string{"", "sim+delay"} {
				four, skipFour := scales(dev, c.stage, 4, c.zextra, fp32comm)
				assert.Equal(t, one, four, "%s: loss scales, 1 rank vs 4 on the same batch", devName(dev))
				assert.Equal(t, skipOne, skipFour, "%s: skipped steps, 1 rank vs 4", devName(dev))
			}
		})
	}
}
