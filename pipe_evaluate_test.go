package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// gptOutTol bounds an fp32 GPT's Evaluate outputs (relative to the
// largest logit) and per-micro-batch losses (relative) against a plain
// forward of the same parameters: they differ by the order of sums only
// (the pipeline's parts compute what the whole model does).
const gptOutTol, gptLossTol = 1e-5, 1e-6

// plainGPT runs a GPT gc (no TP, no SP) with the parameters params over
// each of mbs, outside any engine, and returns per micro-batch the head's
// logits [B·T, V] and the loss.
func plainGPT(t *testing.T, gc nn.GPTConfig, params map[string][]float32, mbs []model.MicroBatch) ([][]float32, []float64) {
	t.Helper()
	ctx := context.Background()
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	g, err := nn.NewReadyGPT(gc, be, 7)
	require.NoError(t, err)
	defer g.Free()
	for _, p := range g.Params() {
		v, err := p.Data.Float32s()
		require.NoError(t, err)
		require.Len(t, params[p.Name], len(v), "parameter %s", p.Name)
		copy(v, params[p.Name])
	}
	var outs [][]float32
	var losses []float64
	for _, mb := range mbs {
		act := mb.Input
		for _, m := range g.Modules() {
			act, err = m.Forward(ctx, act)
			require.NoError(t, err)
		}
		logits, ok := act.(*tensor.Tensor)
		require.True(t, ok, "the GPT's output is a %T", act)
		out := slices.Clone(testmodel.Read(logits))
		loss, _, err := g.Loss(ctx, act, mb.Target, 1)
		require.NoError(t, err)
		outs, losses = append(outs, out), append(losses, loss)
	}
	return outs, losses
}

// gptEvalData is the pipeline tables' GPT data (vocabulary 32, sequences
// of 16): data-parallel rank d's 4 held-out micro-batches of 2 windows
// each, from window base on.
func gptEvalData(t *testing.T, base int) func(d int) []model.MicroBatch {
	t.Helper()
	const vocab, seqLen = 32, 16
	src, err := data.NewMarkov(vocab, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(20_000, 4), Vocab: vocab}
	return func(d int) []model.MicroBatch {
		mbs := make([]model.MicroBatch, 4)
		for i := range mbs {
			k := base + (d*4+i)*2
			mbs[i] = corpus.MakeBatch([]int{k, k + 1}, seqLen).MicroBatch()
		}
		return mbs
	}
}

// requireGPTOutputs checks outs, one rank's Evaluate outputs, against the
// plain logits ref (within tol of the largest logit), of vocab columns: whole, or this TP rank's slice of
// the vocabulary (tpRank of tp) under tensor parallelism.
func requireGPTOutputs(t *testing.T, what string, outs, ref [][]float32, vocab, tpRank, tp int, tol float64) float64 {
	t.Helper()
	require.Len(t, outs, len(ref), "%s: outputs", what)
	cols := vocab / tp
	var worst float64
	for i, r := range ref {
		rows := len(r) / vocab
		require.Len(t, outs[i], rows*cols, "%s: micro-batch %d: output size", what, i)
		var diff, scale float64
		for row := range rows {
			for c := range cols {
				v := float64(r[row*vocab+tpRank*cols+c])
				diff = max(diff, math.Abs(float64(outs[i][row*cols+c])-v))
				scale = max(scale, math.Abs(v))
			}
		}
		require.LessOrEqual(t, diff/scale, tol, "%s: micro-batch %d: output off the plain forward's by %v (largest logit %v)", what, i, diff, scale)
		worst = max(worst, diff/scale)
	}
	return worst
}

// pipeEvaluateCases are TestPipelineEvaluate's pipelines: 2 stages under
// 1F1B with 1 and 2 data-parallel ranks, interleaved, tensor-parallel.
var pipeEvaluateCases = []pipeDevCase{
	{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1},
	{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1},
	{pp: 2, dp: 1, gas: 2, sched: "Interleaved", virtual: 2},
	{pp: 2, dp: 1, gas: 2, tp: 2, sched: "1F1B", virtual: 1},
}

// TestPipelineEvaluate: Evaluate with Outputs and PerMicroBatch on the
// pipeline engine (pipeEvaluateCases), on the CPU backend and the
// simulated device with kernel delays, after 2 steps of training: the
// last stage's outputs are a plain GPT forward's logits on the same
// parameters (under TP, each TP rank's vocabulary slice of them), the
// other stages get none; every stage of a pipe gets the last stage's
// per-micro-batch losses, which are the plain forward's; the loss is
// EvalBatch's bit for bit; NoLoss gives the same outputs; options that
// differ on one rank are refused on every rank, nothing run; and the
// device's are the CPU's bit for bit.
func TestPipelineEvaluate(t *testing.T) {
	for _, c := range pipeEvaluateCases {
		t.Run(c.String(), func(t *testing.T) {
			var cpu *pipeEvaluated
			for _, dev := range []string{"", "sim+delay"} {
				got := pipelineEvaluate(t, dev, c, gptOutTol, gptLossTol)
				if cpu == nil {
					cpu = got
					continue
				}
				require.Equal(t, cpu.outs, got.outs, "%s: outputs differ from the cpu's", devName(dev))
				require.Equal(t, cpu.losses, got.losses, "%s: losses differ from the cpu's", devName(dev))
			}
		})
	}
}

// pipeEvaluated is what pipelineEvaluate's ranks got: per rank, the
// outputs (nil off the last stage) and the per-micro-batch losses.
type pipeEvaluated struct {
	outs   [][][]float32
	losses [][]float64
}

// pipelineEvaluate trains c 2 steps on dev, evaluates on every rank
// (EvalBatch, then Evaluate with Outputs and PerMicroBatch, then with
// Outputs and NoLoss: NaN, no losses, the same outputs) and checks what
// TestPipelineEvaluate says against plain GPT forwards, within outTol and
// lossTol.
func pipelineEvaluate(t *testing.T, dev string, c pipeDevCase, outTol, lossTol float64) *pipeEvaluated {
	t.Helper()
	const vocab = 32
	evalData := gptEvalData(t, 1100)
	gc := nn.GPTConfig{Layers: 2, Heads: 2, Width: 32, Vocab: vocab, SeqLen: 16}
	tp := max(1, c.tp)
	ranks := c.pp * c.dp * tp
	dOf := func(rank int) int { return (rank / tp) % c.dp } // pipe × data × model
	var mu sync.Mutex
	ev := &pipeEvaluated{outs: make([][][]float32, ranks), losses: make([][]float64, ranks)}
	got, err := pipeDevSegment(t, dev, c, parSeg{to: 2, after: func(ctx context.Context, rank int, tr deepgo.Trainer) error {
		mbs := evalData(dOf(rank))
		// options that differ on one rank: refused on every stage, nothing run
		if _, err := tr.Evaluate(ctx, mbs, deepgo.EvalOptions{PerMicroBatch: rank == ranks-1}); err == nil || !strings.Contains(err.Error(), "were handed different EvalOptions") {
			return fmt.Errorf("rank %d: options differing on rank %d: want them refused, got %v", rank, ranks-1, err)
		}
		want, err := tr.EvalBatch(ctx, mbs)
		if err != nil {
			return err
		}
		res, err := tr.Evaluate(ctx, mbs, deepgo.EvalOptions{Outputs: true, PerMicroBatch: true})
		if err != nil {
			return err
		}
		var o [][]float32
		if res.Outputs != nil {
			if o, err = outputValues(&res, len(mbs)); err != nil {
				return fmt.Errorf("rank %d: %w", rank, err)
			}
		}
		if math.Float64bits(res.Loss) != math.Float64bits(want) {
			return fmt.Errorf("rank %d: Evaluate's loss %v, EvalBatch's %v", rank, res.Loss, want)
		}
		nl, err := tr.Evaluate(ctx, mbs, deepgo.EvalOptions{Outputs: true, NoLoss: true})
		if err != nil {
			return err
		}
		var nlo [][]float32
		if nl.Outputs != nil {
			if nlo, err = outputValues(&nl, len(mbs)); err != nil {
				return fmt.Errorf("rank %d: NoLoss: %w", rank, err)
			}
		}
		if !math.IsNaN(nl.Loss) || nl.Losses != nil || (o == nil) != (nlo == nil) {
			return fmt.Errorf("rank %d: NoLoss: loss %v, losses %v, outputs %d (with the loss %d)", rank, nl.Loss, nl.Losses, len(nlo), len(o))
		}
		for i := range o {
			if !slices.Equal(o[i], nlo[i]) {
				return fmt.Errorf("rank %d: NoLoss: micro-batch %d's outputs differ from those with the loss", rank, i)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		ev.outs[rank], ev.losses[rank] = o, res.Losses
		return nil
	}})
	require.NoError(t, err, devName(dev))
	var worst float64
	for rank := range ranks {
		d, last := dOf(rank), rank/(c.dp*tp) == c.pp-1
		ref, refLosses := plainGPT(t, gc, got.params, evalData(d))
		what := fmt.Sprintf("%s: rank %d", devName(dev), rank)
		if !last {
			require.Nil(t, ev.outs[rank], "%s, not the last stage: outputs", what)
		} else {
			worst = max(worst, requireGPTOutputs(t, what, ev.outs[rank], ref, vocab, rank%tp, tp, outTol))
		}
		require.Len(t, ev.losses[rank], len(refLosses), "%s: losses", what)
		lastRank := ((c.pp-1)*c.dp+d)*tp + rank%tp
		for i, l := range ev.losses[rank] {
			require.Equal(t, math.Float64bits(ev.losses[lastRank][i]), math.Float64bits(l), "%s: micro-batch %d: loss %v, the last stage's %v", what, i, l, ev.losses[lastRank][i])
			require.InEpsilon(t, refLosses[i], l, lossTol, "%s: micro-batch %d: loss vs the plain forward's", what, i)
		}
	}
	t.Logf("%s: outputs vs plain forwards: rel %.1e", devName(dev), worst)
	return ev
}
