package nn_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With Megatron's sequence parallelism on, TP 2 and 4, alone and with 2
// data-parallel ranks at ZeRO 0-2 and under the engine's activation
// checkpointing, follow the plain single-process loop to the plain TP
// test's tolerances (losses 1e-6 relative, parameters 3e-6 norm-wise).
// gradient_clipping 1.0 clips every step: a LayerNorm gradient left as a
// rank's sequence-shard share (not summed over the TP group) would both
// train the LayerNorms wrong and change the clipped norm.
func TestGPTMegatronSequenceParallelEquivalence(t *testing.T) {
	const steps, lossTol, paramTol = 4, 1e-6, 3e-6
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	runs := []tpRun{{tp: 2, dp: 1}, {tp: 4, dp: 1, stage: 1}, {tp: 2, dp: 2}, {tp: 2, dp: 2, stage: 1},
		{tp: 2, dp: 2, stage: 2}, {tp: 4, dp: 1, stage: 2}, {tp: 2, dp: 2, stage: 1, ckpt: true}}
	for _, clip := range []float64{1.0, mixedClip} {
		plainLoss, plainParams, _ := plainGPT(t, tpGPT(corpus.Vocab), eqSeed, steps, clip, func(step int) model.TokenBatch {
			return eqBatch(corpus, step, 1, 0)
		})
		want := flatParams(plainParams)
		for _, r := range runs {
			r.seq = true
			t.Run(fmt.Sprintf("clip%g-%v", clip, r), func(t *testing.T) {
				loss, params, _ := tpCurve(t, r, steps, clip, corpus)
				requireFollowsPlain(t, fmt.Sprintf("%v clip %g", r, clip), plainLoss, loss, want, flatParams(params), lossTol, paramTol)
			})
		}
	}
}

// seqMemory runs one forward of tpGPT over tp ranks, with every block
// checkpointed by the model itself, and returns rank 0's element count of
// each tensor the modules hand on between blocks and the bytes the
// checkpointed blocks keep (their inputs).
func seqMemory(t *testing.T, tp int, seq bool, b model.TokenBatch) (between []int, saved int64) {
	t.Helper()
	err := local.Run(context.Background(), tp, local.Options{Timeout: 30 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg := tpGPT(32)
		cfg.TP = nn.TP{Comm: c, SequenceParallel: seq}
		cfg.Checkpointing.Enabled = true
		g, err := nn.NewReadyGPT(cfg, c.(interface{ Backend() backend.Backend }).Backend(), eqSeed)
		if err != nil {
			return err
		}
		defer g.Free()
		var act model.Activation = b
		var sizes []int
		for i, m := range g.Modules() {
			if act, err = m.Forward(ctx, act); err != nil {
				return err
			}
			if i < len(g.Blocks)+1 { // the embedding's and each block's output
				sizes = append(sizes, act.(interface{ Numel() int }).Numel())
			}
		}
		if c.Rank() == 0 {
			between, saved = sizes, g.ActivationStats().SavedInputBytes
		}
		return nil
	})
	require.NoError(t, err, "tp %d seq %v", tp, seq)
	return between, saved
}

// Under Megatron's sequence parallelism each TP rank holds 1/tp of the
// residual stream between blocks: the embedding's and every block's
// output, and so a checkpointed block's saved input, are tp times smaller
// than under plain TP (which holds all B·T·C on every rank).
func TestGPTMegatronSequenceParallelMemory(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(2000, 4), Vocab: 32}
	b := eqBatch(corpus, 0, 1, 0)
	full := b.B * b.T * tpGPT(32).Width
	for _, tp := range []int{2, 4} {
		plain, plainSaved := seqMemory(t, tp, false, b)
		split, splitSaved := seqMemory(t, tp, true, b)
		require.Len(t, split, len(plain))
		for i := range plain {
			assert.Equal(t, full, plain[i], "tp %d module %d: plain TP holds the whole stream", tp, i)
			assert.Equal(t, full/tp, split[i], "tp %d module %d: Megatron SP holds 1/%d of it", tp, i, tp)
		}
		assert.Equal(t, int64(4*full*tpGPT(32).Layers), plainSaved, "tp %d: plain TP saved inputs", tp)
		assert.Equal(t, plainSaved/int64(tp), splitSaved, "tp %d: Megatron SP saved inputs", tp)
		t.Logf("tp %d: between blocks %d vs %d elements; saved inputs %d vs %d bytes", tp, split[1], plain[1], splitSaved, plainSaved)
	}
}

// A sequence length the TP group cannot split is refused at Forward naming
// both numbers, and sequence parallelism without a TP group of 2 or more
// at NewGPT.
func TestGPTMegatronSequenceParallelErrors(t *testing.T) {
	err := local.Run(context.Background(), 4, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		cfg := tpGPT(32)
		cfg.TP = nn.TP{Comm: c, SequenceParallel: true}
		g, err := nn.NewReadyGPT(cfg, c.(interface{ Backend() backend.Backend }).Backend(), 1)
		if err != nil {
			return err
		}
		defer g.Free()
		ids := make([]int32, 6)
		_, err = g.Forward(nil, ids, ids, 1, 6)
		if !assert.ErrorContains(t, err, "sequence length T 6 is not divisible by tensor_model_parallel_size 4") {
			return fmt.Errorf("T 6 over tp 4: %v", err)
		}
		return nil
	})
	require.NoError(t, err)
	err = local.Run(context.Background(), 1, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		for _, tp := range []nn.TP{{SequenceParallel: true}, {Comm: c, SequenceParallel: true}} {
			cfg := tpGPT(32)
			cfg.TP = tp
			_, err := nn.NewGPT(cfg)
			assert.ErrorContains(t, err, "TP.SequenceParallel) with tensor_model_parallel_size 1")
		}
		return nil
	})
	require.NoError(t, err)
}

// Gradients accumulate over micro-batches: two forwards and backwards of
// different batches without clearing give the unsharded model's sum (a
// LayerNorm gradient all-reduced in place, accumulated part included,
// would count the first micro-batch tp times).
func TestGPTMegatronSequenceParallelAccumulates(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(2000, 4), Vocab: 32}
	batches := []model.TokenBatch{eqBatch(corpus, 0, 1, 0), eqBatch(corpus, 1, 1, 0)}
	twice := func(g *nn.GPT) error {
		for _, b := range batches {
			if _, err := g.Forward(nil, b.Inputs, b.Targets, b.B, b.T); err != nil {
				return err
			}
			if err := g.Backward(nil); err != nil {
				return err
			}
		}
		return nil
	}
	ref := unshardedGPT(t)
	require.NoError(t, twice(ref))
	want := flatParams(gradsOf(t, ref))
	err = local.Run(context.Background(), 2, local.Options{Timeout: 30 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg := tpGPT(32)
		cfg.TP = nn.TP{Comm: c, SequenceParallel: true}
		g, err := nn.NewReadyGPT(cfg, c.(interface{ Backend() backend.Backend }).Backend(), eqSeed)
		if err != nil {
			return err
		}
		defer g.Free()
		if err := twice(g); err != nil {
			return err
		}
		full, err := g.Unshard(ctx, gradsOf(t, g))
		if err != nil {
			return err
		}
		if r := relNorm(want, flatParams(full)); r > 1e-5 {
			return fmt.Errorf("rank %d: accumulated gradients differ from the unsharded model's by %.3g norm-wise", c.Rank(), r)
		}
		return nil
	})
	require.NoError(t, err)
}

// unshardedGPT is tpGPT(32) on one rank's CPU backend, freed with the test.
func unshardedGPT(t *testing.T) *nn.GPT {
	t.Helper()
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	t.Cleanup(func() { be.Close() })
	ref, err := nn.NewReadyGPT(tpGPT(32), be, eqSeed)
	require.NoError(t, err)
	t.Cleanup(ref.Free)
	return ref
}
