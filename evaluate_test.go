package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outTol bounds an Evaluate output against a plain fp32 forward's, as the
// largest difference over the largest magnitude of the reference, and
// mbLossTol a micro-batch's loss (relative): fp32 may differ by the
// order of the sums (measured: equal); half precision by its rounded
// masters and activations (evalTol's reasons, per element or per
// micro-batch instead of in a mean; measured: outputs 7.2e-4 fp16, 3e-3
// bf16, losses 8.4e-5 and 4.6e-4; bounds about 5 times those). bf16
// master weights (bf16m) are the plain forward's weights exactly: fp32's.
var (
	outTol    = map[string]float64{"": 1e-6, "fp16": 4e-3, "bf16": 1.5e-2, "bf16m": 1e-6}
	mbLossTol = map[string]float64{"": 1e-6, "fp16": 4e-4, "bf16": 2.5e-3, "bf16m": 1e-6}
)

// outputValues reads the n outputs of res as float32 (widening halves),
// then frees them: an error if res does not hold n of them.
func outputValues(res *deepgo.EvalResult, n int) ([][]float32, error) {
	defer res.Free()
	if len(res.Outputs) != n {
		return nil, fmt.Errorf("%d outputs for %d micro-batches", len(res.Outputs), n)
	}
	vals := make([][]float32, n)
	for i, o := range res.Outputs {
		if o == nil || !o.Device().IsCPU() || !o.Contiguous() {
			return nil, fmt.Errorf("output %d is %v, want a contiguous host tensor", i, o)
		}
		vals[i] = slices.Clone(testmodel.Read(o))
	}
	return vals, res.Free()
}

// evaluate runs Evaluate over mbs (rank's of world) with Outputs and
// PerMicroBatch, recording its loss as "evaluate", its losses as
// "micro-batch i" and its outputs, and with Outputs and NoLoss, which must
// give NaN, no losses and the same outputs bit for bit.
func (l *evalLosses) evaluate(ctx context.Context, rank, world int, tr deepgo.Trainer, mbs []model.MicroBatch) error {
	res, err := tr.Evaluate(ctx, mbs, deepgo.EvalOptions{Outputs: true, PerMicroBatch: true})
	if err != nil {
		return fmt.Errorf("rank %d: Evaluate: %w", rank, err)
	}
	outs, err := outputValues(&res, len(mbs))
	if err != nil {
		return fmt.Errorf("rank %d: Evaluate: %w", rank, err)
	}
	if len(res.Losses) != len(mbs) {
		return fmt.Errorf("rank %d: Evaluate: %d losses for %d micro-batches", rank, len(res.Losses), len(mbs))
	}
	nl, err := tr.Evaluate(ctx, mbs, deepgo.EvalOptions{Outputs: true, NoLoss: true})
	if err != nil {
		return fmt.Errorf("rank %d: Evaluate with NoLoss: %w", rank, err)
	}
	nlOuts, err := outputValues(&nl, len(mbs))
	if err != nil {
		return fmt.Errorf("rank %d: Evaluate with NoLoss: %w", rank, err)
	}
	if !math.IsNaN(nl.Loss) || nl.Losses != nil {
		return fmt.Errorf("rank %d: Evaluate with NoLoss: loss %v, losses %v; want NaN and none", rank, nl.Loss, nl.Losses)
	}
	for i := range outs {
		if !slices.Equal(outs[i], nlOuts[i]) {
			return fmt.Errorf("rank %d: micro-batch %d: the outputs with NoLoss differ from those with the loss", rank, i)
		}
	}
	l.add("evaluate", rank, world, res.Loss)
	for i, v := range res.Losses {
		l.add(fmt.Sprintf("micro-batch %d", i), rank, world, v)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.outs == nil {
		l.outs = map[int][][]float32{}
	}
	l.outs[rank] = outs
	return nil
}

// requireEvaluate checks what evaluate recorded against plain forwards
// (per rank, per micro-batch) of the same parameters: the loss is
// EvalBatch's bit for bit, each micro-batch's loss the plain one's
// (mbLossTol) and each output the plain one's (outTol).
func (l *evalLosses) requireEvaluate(t *testing.T, precision string, fwds [][]plainFwd) {
	t.Helper()
	var worstLoss, worstOut float64
	for rank, fs := range fwds {
		require.Equal(t, math.Float64bits(l.calls["after"][rank]), math.Float64bits(l.calls["evaluate"][rank]),
			"rank %d: Evaluate's loss %v, EvalBatch's %v", rank, l.calls["evaluate"][rank], l.calls["after"][rank])
		require.Len(t, l.outs[rank], len(fs), "rank %d: outputs", rank)
		for i, f := range fs {
			got := l.calls[fmt.Sprintf("micro-batch %d", i)][rank]
			d := math.Abs(got-f.loss) / math.Abs(f.loss)
			assert.LessOrEqual(t, d, mbLossTol[precision], "rank %d micro-batch %d: Evaluate's loss %v, plain forward %v", rank, i, got, f.loss)
			worstLoss = max(worstLoss, d)
			out := l.outs[rank][i]
			require.Len(t, out, len(f.out), "rank %d micro-batch %d: output size", rank, i)
			var diff, scale float64
			for j, v := range f.out {
				diff = max(diff, math.Abs(float64(out[j])-float64(v)))
				scale = max(scale, math.Abs(float64(v)))
			}
			assert.LessOrEqual(t, diff/scale, outTol[precision], "rank %d micro-batch %d: output differs from the plain forward's by %v (largest value %v)", rank, i, diff, scale)
			worstOut = max(worstOut, diff/scale)
		}
	}
	t.Logf("Evaluate vs plain forwards: losses rel %.1e, outputs rel %.1e", worstLoss, worstOut)
}

// TestEvaluateRefused: options Evaluate refuses, on 2 ranks at ZeRO stage
// 3, on the CPU backend and the simulated device: NoLoss without Outputs,
// NoLoss with PerMicroBatch (on both ranks, and on rank 1 only), and
// different options on the two ranks. Every rank gets an error at once
// (the ranks agree before any forward), its own or naming the rank at
// fault, and nothing is marked: the next Evaluate and TrainBatch run.
func TestEvaluateRefused(t *testing.T) {
	r := run{stage: 3, world: 2, gas: 1}
	half := globalBatch / 2
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	good := func(rank int) []model.MicroBatch {
		return []model.MicroBatch{data.Micro(0, globalBatch, rank*half, half)}
	}
	const noOut = "EvalOptions.NoLoss without EvalOptions.Outputs would return nothing"
	const noLosses = "EvalOptions.NoLoss with EvalOptions.PerMicroBatch"
	cases := []struct {
		name string
		opts [2]deepgo.EvalOptions // rank 0's, rank 1's
		want [2]string
	}{
		{"NoLoss without Outputs", [2]deepgo.EvalOptions{{NoLoss: true}, {NoLoss: true}}, [2]string{noOut, noOut}},
		{"NoLoss with PerMicroBatch", [2]deepgo.EvalOptions{{Outputs: true, NoLoss: true, PerMicroBatch: true}, {Outputs: true, NoLoss: true, PerMicroBatch: true}},
			[2]string{noLosses, noLosses}},
		{"refused on rank 1", [2]deepgo.EvalOptions{{Outputs: true, NoLoss: true}, {NoLoss: true}},
			[2]string{"rank 1 of group", noOut}},
		{"different options", [2]deepgo.EvalOptions{{Outputs: true}, {}},
			[2]string{"were handed different EvalOptions: rank 0 {Outputs}, rank 1 {}", "were handed different EvalOptions: rank 0 {Outputs}, rank 1 {}"}},
	}
	for _, dev := range []string{"", "sim"} {
		t.Run(devName(dev), func(t *testing.T) {
			r := r
			r.dev, r.steps = dev, -1
			r.after = func(ctx context.Context, rank int, e *deepgo.Engine) error {
				for _, c := range cases {
					res, err := e.Evaluate(ctx, good(rank), c.opts[rank])
					if err == nil || !strings.Contains(err.Error(), "Evaluate: ") || !strings.Contains(err.Error(), c.want[rank]) {
						res.Free()
						return fmt.Errorf("%s: rank %d: want an error saying %q, got %v", c.name, rank, c.want[rank], err)
					}
					if res.Outputs != nil || res.Losses != nil {
						return fmt.Errorf("%s: rank %d: a refused evaluation returned outputs or losses", c.name, rank)
					}
					res, err = e.Evaluate(ctx, good(rank), deepgo.EvalOptions{Outputs: true})
					if err != nil {
						return fmt.Errorf("%s: rank %d: the next Evaluate: %w", c.name, rank, err)
					}
					if _, err := outputValues(&res, 1); err != nil {
						return fmt.Errorf("%s: rank %d: the next Evaluate: %w", c.name, rank, err)
					}
				}
				if _, err := e.TrainBatch(ctx, good(rank)); err != nil {
					return fmt.Errorf("rank %d: TrainBatch after the refusals: %w", rank, err)
				}
				return nil
			}
			_, err := train(t, r)
			require.NoError(t, err)
		})
	}
}

// evaluateOwn runs Evaluate with Outputs and PerMicroBatch over mbs, whose
// EvalBatch gave loss, and returns the outputs and losses: an error
// unless its loss is loss bit for bit, it has an output per micro-batch
// (none off a pipeline's last stage) and a finite positive loss per
// micro-batch.
func evaluateOwn(ctx context.Context, tr deepgo.Trainer, mbs []model.MicroBatch, loss float64) ([][]float32, []float64, error) {
	res, err := tr.Evaluate(ctx, mbs, deepgo.EvalOptions{Outputs: true, PerMicroBatch: true})
	if err != nil {
		return nil, nil, fmt.Errorf("Evaluate: %w", err)
	}
	var outs [][]float32
	if pe, ok := tr.(*deepgo.PipeEngine); ok && pe.Stage() != pe.Stages()-1 {
		if res.Outputs != nil {
			res.Free()
			return nil, nil, fmt.Errorf("Evaluate: outputs on stage %d of %d", pe.Stage(), pe.Stages())
		}
	} else if outs, err = outputValues(&res, len(mbs)); err != nil {
		return nil, nil, fmt.Errorf("Evaluate: %w", err)
	}
	if math.Float64bits(res.Loss) != math.Float64bits(loss) {
		return nil, nil, fmt.Errorf("Evaluate's loss %v, EvalBatch's %v", res.Loss, loss)
	}
	if len(res.Losses) != len(mbs) {
		return nil, nil, fmt.Errorf("Evaluate: %d losses for %d micro-batches", len(res.Losses), len(mbs))
	}
	for i, l := range res.Losses {
		if math.IsNaN(l) || math.IsInf(l, 0) || l <= 0 {
			return nil, nil, fmt.Errorf("Evaluate: micro-batch %d's loss %v", i, l)
		}
	}
	return outs, res.Losses, nil
}
