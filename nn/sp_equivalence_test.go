package nn_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spRun is one sequence × data parallel layout.
type spRun struct {
	sp, dp, stage int
	ckpt          bool
	window        int
	prec          string // a precision section, with its trailing comma
}

func (r spRun) String() string {
	return fmt.Sprintf("sp%d-dp%d-zero%d-ckpt%v-w%d", r.sp, r.dp, r.stage, r.ckpt, r.window)
}

// spCurve trains tpGPT (4 heads, 8 tokens) with the engine over
// r.sp × r.dp in-process ranks (SequenceParallelGroups' layout, which is
// TensorSequenceParallelGroups' at TP 1): each SP rank takes its sequence
// shard of its data rank's micro-batch. It returns rank 0's losses and
// parameters.
func spCurve(t *testing.T, r spRun, steps int, clip float64, corpus *data.Tokens) ([]float64, map[string][]float32) {
	t.Helper()
	return tspCurve(t, tspRun{tp: 1, sp: r.sp, dp: r.dp, stage: r.stage, ckpt: r.ckpt, window: r.window, extra: r.prec}, steps, clip, corpus)
}

// The GPT with Ulysses sequence parallelism over 2 and 4 ranks, alone and
// with 2 data-parallel ranks at ZeRO 0-3, follows the plain single-process
// loop on the whole sequences: losses to 1e-6 relative and parameters to
// 3e-6 norm-wise (the TP test's tolerances). Sequence shards that kept
// positions 0..T/sp-1 instead of their global offsets, an exchange that
// mixed heads or tokens, or gradients averaged over the data ranks only
// would all move the losses far past 1e-6 at the first or second step.
func TestGPTSequenceParallelEquivalence(t *testing.T) {
	const steps, lossTol, paramTol = 4, 1e-6, 3e-6
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	runs := []spRun{{sp: 2, dp: 1}, {sp: 4, dp: 1, stage: 1}, {sp: 2, dp: 2}, {sp: 2, dp: 2, stage: 2},
		{sp: 4, dp: 1, stage: 2}, {sp: 2, dp: 2, stage: 3}, {sp: 2, dp: 2, stage: 1, ckpt: true}, {sp: 2, dp: 1, window: 3}}
	for _, clip := range []float64{1.0, mixedClip} {
		plain := map[int][]float64{}
		plainParams := map[int][]float32{}
		for _, w := range []int{0, 3} {
			cfg := tpGPT(corpus.Vocab)
			cfg.AttentionWindow = w
			l, ps, _ := plainGPT(t, cfg, eqSeed, steps, clip, func(step int) model.TokenBatch { return eqBatch(corpus, step, 1, 0) })
			plain[w], plainParams[w] = l, flatParams(ps)
		}
		for _, r := range runs {
			t.Run(fmt.Sprintf("clip%g-%v", clip, r), func(t *testing.T) {
				loss, params := spCurve(t, r, steps, clip, corpus)
				requireFollowsPlain(t, fmt.Sprintf("%v clip %g", r, clip), plain[r.window], loss, plainParams[r.window], flatParams(params), lossTol, paramTol)
			})
		}
	}
}

// Under fp16 and bf16 the SP ranks compute on the half-precision weights
// (position rows read and their gradients added at the rank's offsets in
// the half tables) and follow SP 1 with the same precision to
// half-precision rounding (measured: fp16 9e-7, bf16 1e-5 relative; a
// shard at the wrong positions is off by 4e-3).
func TestGPTSequenceParallelHalf(t *testing.T) {
	const steps = 4
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	for _, prec := range []string{`"fp16": {"enabled": true, "loss_scale": 1024},`, `"bf16": {"enabled": true},`} {
		want, _ := spCurve(t, spRun{sp: 1, dp: 1, stage: 1, prec: prec}, steps, 1.0, corpus)
		for _, sp := range []int{2, 4} {
			got, _ := spCurve(t, spRun{sp: sp, dp: 1, stage: 1, prec: prec}, steps, 1.0, corpus)
			t.Logf("%s sp %d: loss rel %.3g", prec, sp, maxLossRel(want, got))
			assert.LessOrEqual(t, maxLossRel(want, got), 1e-4, "%s sp %d: losses vs SP 1", prec, sp)
		}
	}
}

// One forward and backward on sequence shards, without an engine, gives
// the whole batch's mean loss on every SP rank, and the ranks' gradients
// (each its local mean's) averaged over the group are the unsharded
// model's, to float32 summation order.
func TestGPTSequenceParallelGradients(t *testing.T) {
	b, wantLoss, want := unshardedGrads(t)
	for _, sp := range []int{2, 4} {
		grads := shardedGrads(t, sp, b, wantLoss, func(_ context.Context, c comm.Comm) (nn.GPTConfig, comm.Comm, error) {
			cfg := tpGPT(32)
			cfg.SP = nn.SP{Comm: c}
			return cfg, c, nil
		})
		rel := relNorm(want, meanGrads(grads))
		t.Logf("sp %d: gradient rel %.3g", sp, rel)
		assert.LessOrEqual(t, rel, 1e-6, "sp %d: averaged gradients vs unsharded", sp)
	}
}

// unshardedGrads is one forward and backward of the unsharded tpGPT(32)
// on the first batch: the batch, the loss and the flattened gradients.
func unshardedGrads(t *testing.T) (model.TokenBatch, float32, []float32) {
	t.Helper()
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(2000, 4), Vocab: 32}
	b := eqBatch(corpus, 0, 1, 0)
	ref := unshardedGPT(t)
	loss, err := ref.Forward(nil, b.Inputs, b.Targets, b.B, b.T)
	require.NoError(t, err)
	require.NoError(t, ref.Backward(nil))
	return b, loss, flatParams(gradsOf(t, ref))
}

// shardedGrads runs one forward and backward of the GPT that build makes
// for each of n in-process ranks on b, cut to the rank's sequence shard
// over the group build returns with it (nil: whole), without an engine.
// Every rank's loss must be wantLoss to 1e-6 relative; it returns each
// rank's gradients, unsharded over its TP group and flattened.
func shardedGrads(t *testing.T, n int, b model.TokenBatch, wantLoss float32, build func(ctx context.Context, c comm.Comm) (nn.GPTConfig, comm.Comm, error)) [][]float32 {
	t.Helper()
	out := make([][]float32, n)
	err := local.Run(context.Background(), n, local.Options{Timeout: 30 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, seq, err := build(ctx, c)
		if err != nil {
			return err
		}
		g, err := nn.NewReadyGPT(cfg, c.(interface{ Backend() backend.Backend }).Backend(), eqSeed)
		if err != nil {
			return err
		}
		defer g.Free()
		mb := b
		if seq != nil {
			if mb, err = b.SequenceShard(seq.Rank(), seq.Size()); err != nil {
				return err
			}
		}
		loss, err := g.Forward(nil, mb.Inputs, mb.Targets, mb.B, mb.T)
		if err != nil {
			return err
		}
		if err := g.Backward(nil); err != nil {
			return err
		}
		if l := maxLossRel([]float64{float64(wantLoss)}, []float64{float64(loss)}); l > 1e-6 {
			return fmt.Errorf("rank %d: loss %v, unsharded %v", c.Rank(), loss, wantLoss)
		}
		full, err := g.Unshard(ctx, gradsOf(t, g))
		if err != nil {
			return err
		}
		out[c.Rank()] = flatParams(full)
		return nil
	})
	require.NoError(t, err)
	return out
}

// meanGrads is the element-wise mean of the ranks' gradients, in float64.
func meanGrads(grads [][]float32) []float32 {
	out := make([]float32, len(grads[0]))
	for i := range out {
		var s float64
		for _, g := range grads {
			s += float64(g[i])
		}
		out[i] = float32(s / float64(len(grads)))
	}
	return out
}

func gradsOf(t *testing.T, g *nn.GPT) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range g.Params() {
		v, err := p.Grad.Float32s()
		require.NoError(t, err)
		out[p.Name] = append([]float32(nil), v...)
	}
	return out
}

// Sizes that do not split are refused naming both numbers: heads not
// divisible by the SP degree at NewGPT, a sequence length not divisible by
// it at the data path, and whole sequences longer than seq_len at Forward;
// an engine without the SP group is refused (with TP:
// TestGPTTensorSequenceParallelErrors).
func TestGPTSequenceParallelErrors(t *testing.T) {
	err := local.Run(context.Background(), 4, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		cfg := nn.GPTConfig{Layers: 1, Heads: 6, Width: 12, Vocab: 8, SeqLen: 8, SP: nn.SP{Comm: c}}
		_, err := nn.NewGPT(cfg)
		if err == nil || !containsAll(err.Error(), "heads 6", "sequence_parallel_size 4") {
			return fmt.Errorf("heads 6 over sp 4: got %v", err)
		}
		cfg.Heads, cfg.Width = 4, 16
		g, err := nn.NewReadyGPT(cfg, c.(interface{ Backend() backend.Backend }).Backend(), 1)
		if err != nil {
			return err
		}
		defer g.Free()
		// shards of 3 tokens make sequences of 12 > seq_len 8 (checked
		// before any collective, so every rank fails alike), also where a
		// pipeline part after the embedding learns the length
		in := make([]int32, 3)
		part, err := g.NewPart(1, 3)
		if err != nil {
			return err
		}
		defer part.Free()
		if _, err := part.Input(ctx, model.TokenBatch{Inputs: in, Targets: in, B: 1, T: 3}.MicroBatch()); err == nil || !containsAll(err.Error(), "12", "8", "part input") {
			return fmt.Errorf("part input too long: got %v", err)
		}
		if _, err := g.Forward(nil, in, in, 1, 3); err == nil || !containsAll(err.Error(), "12", "8") {
			return fmt.Errorf("too long: got %v", err)
		}
		ecfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, "sequence_parallel_size": 4, "optimizer": {"type": "Adam", "params": {"lr": 0.001}}}`))
		if err != nil {
			return err
		}
		if _, err := deepgo.Initialize(ctx, ecfg, g, deepgo.WithComm(c)); err == nil || !containsAll(err.Error(), "sequence_parallel_size 4", "WithSequenceParallel") {
			return fmt.Errorf("engine without the SP group: got %v", err)
		}
		return nil
	})
	require.NoError(t, err)
	_, err = model.TokenBatch{Inputs: make([]int32, 6), Targets: make([]int32, 6), B: 1, T: 6}.SequenceShard(0, 4)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sequence length 6 is not divisible by sequence_parallel_size 4")
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
