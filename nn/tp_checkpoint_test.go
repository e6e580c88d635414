package nn_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/internal/faultbe"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tpSegment is one stretch of a tensor-parallel training run: over r's
// layout it loads from (unless ""), trains steps steps on the batches of
// steps first, first+1, ..., saving to save (unless "") after saveAt of
// them, and returns rank 0's losses and parameters unsharded over its TP
// group. loadDir, when set, gives each world rank its own directory to
// load from; opts are Load's options.
type tpSegment struct {
	r                    tpRun
	from, save           string
	loadDir              func(rank int) string
	load                 deepgo.LoadOptions
	first, steps, saveAt int
	// loadErrs (one per world rank), when set: each rank only loads and
	// records the outcome there, returning nil, so that no rank's failure
	// aborts the in-process world and hastens the others'; armed is set
	// for the length of that Load
	loadErrs []error
	armed    *atomic.Bool
	// opts, when set, adds Initialize options for a rank
	opts func(rank int, c comm.Comm) []deepgo.Option
}

func (s tpSegment) run(t *testing.T, corpus *data.Tokens) ([]float64, map[string][]float32, error) {
	t.Helper()
	r := s.r
	cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": 1,
		"gradient_clipping": 1.0, "zero_optimization": {"stage": %d, "reduce_bucket_size": 500},
		"tensor_model_parallel_size": %d,
		"optimizer": {"type": "AdamW", "params": {"lr": %g, "weight_decay": %g}},
		"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_max_lr": %g}}}`, eqB/r.dp, r.stage, r.tp, eqLR, eqWD, eqLR)
	losses := make([]float64, s.steps)
	var params map[string][]float32
	err := local.Run(context.Background(), r.tp*r.dp, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(cfgJSON))
		if err != nil {
			return err
		}
		dc, tc, err := deepgo.TensorParallelGroups(ctx, c, r.tp)
		if err != nil {
			return err
		}
		gc := tpGPT(corpus.Vocab)
		gc.TP = nn.TP{Comm: tc}
		g, err := nn.NewReadyGPT(gc, nil, eqSeed+1) // not the saved run's initial values
		if err != nil {
			return err
		}
		defer g.Free()
		freezeGPT(g, r.freeze)
		opts := []deepgo.Option{deepgo.WithComm(dc), deepgo.WithTensorParallel(tc)}
		if s.opts != nil {
			opts = append(opts, s.opts(c.Rank(), c)...)
		}
		tr, err := deepgo.Initialize(ctx, cfg, g, opts...)
		if err != nil {
			return err
		}
		defer tr.Close()
		from := s.from
		if s.loadDir != nil {
			from = s.loadDir(c.Rank())
		}
		if s.loadErrs != nil {
			if s.armed != nil {
				s.armed.Store(true)
				defer s.armed.Store(false)
			}
			_, s.loadErrs[c.Rank()] = tr.(ckptTrainer).Load(ctx, from, s.load)
			return nil
		}
		return resumeSegment(ctx, tr.(ckptTrainer), g, from, s.load, s.first, s.save, s.saveAt, func(off int, losses []float64) error {
			_, err := trainSteps(ctx, tr, losses, c.Rank() == 0, func(step int) model.TokenBatch {
				return eqBatch(corpus, s.first+off+step, r.dp, dc.Rank())
			})
			return err
		}, losses, c.Rank() == 0, &params)
	})
	return losses, params, err
}

// A checkpoint saved with tensor parallelism keeps the TP shards and loads
// at any TP degree: saved at TP 2 (× 1 and × 2 data ranks, ZeRO 1 and 2)
// and at TP 1 after N steps, it is loaded by fresh engines at TP 1, 2 and
// 4 (and other data-parallel worlds and stages), which then train M more
// steps. Their losses follow the run that went on without stopping to
// 1e-6 relative
// and their unsharded parameters to 3e-6 norm-wise (the TP equivalence
// test's tolerances: a new TP degree or data world changes float32
// summation order only); at the saving layout they are bit-identical.
// Resuming without the optimizer state (Adam's moments zero, step count
// 0) is far off, so the comparison sees the moments resharded too.
func TestGPTTensorParallelCheckpointReshard(t *testing.T) {
	const n, m = 3, 3
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	for _, saved := range []tpRun{{tp: 2, dp: 1, stage: 1}, {tp: 2, dp: 2, stage: 2}, {tp: 1, dp: 1}, {tp: 2, dp: 2, stage: 3}} {
		dir := t.TempDir()
		all, refParams, err := tpSegment{r: saved, save: dir, steps: n + m, saveAt: n}.run(t, corpus)
		require.NoError(t, err, "saving at %v", saved)
		refLoss, want := all[n:], flatParams(refParams)
		loads := []tpRun{{tp: 1, dp: 1}, {tp: 2, dp: 1, stage: 2}, {tp: 4, dp: 1, stage: 1}, {tp: 2, dp: 2, stage: 1}, {tp: 2, dp: 2, stage: 3}, saved}
		for _, r := range loads {
			t.Run(fmt.Sprintf("saved-%v/load-%v", saved, r), func(t *testing.T) {
				loss, params, err := tpSegment{r: r, from: dir, first: n, steps: m}.run(t, corpus)
				require.NoError(t, err)
				requireResumedLike(t, fmt.Sprintf("%v → %v", saved, r), r == saved, refLoss, loss, want, params)
			})
		}
	}
}

// ckptTrainer is what a checkpoint segment drives: the data-parallel
// Engine or the pipeline engine.
type ckptTrainer interface {
	deepgo.Trainer
	Save(ctx context.Context, dir string, opts deepgo.SaveOptions) error
	Load(ctx context.Context, dir string, opts deepgo.LoadOptions) (deepgo.LoadResult, error)
	GlobalSteps() int
}

// resumeSegment is one rank's part of a checkpoint segment: it loads from
// (unless "") and checks the step count is first, trains (train(off,
// losses) runs len(losses) steps from step first+off) saveAt steps, saves
// to save (unless ""), trains the rest of losses, and returns the
// parameters unsharded over g's TP group in *params when record is set.
func resumeSegment(ctx context.Context, e ckptTrainer, g *nn.GPT, from string, opts deepgo.LoadOptions, first int, save string, saveAt int,
	train func(off int, losses []float64) error, losses []float64, record bool, params *map[string][]float32) error {
	if from != "" {
		if _, err := e.Load(ctx, from, opts); err != nil {
			return err
		}
		if e.GlobalSteps() != first {
			return fmt.Errorf("loaded at global step %d, want %d", e.GlobalSteps(), first)
		}
	}
	if err := train(0, losses[:saveAt]); err != nil {
		return err
	}
	if save != "" {
		if err := e.Save(ctx, save, deepgo.SaveOptions{}); err != nil {
			return err
		}
	}
	if err := train(saveAt, losses[saveAt:]); err != nil {
		return err
	}
	ps, err := e.Parameters(ctx)
	if err != nil {
		return err
	}
	full, err := g.Unshard(ctx, ps)
	if record {
		*params = full
	}
	return err
}

// requireResumedLike checks a resumed run's losses and unsharded
// parameters against the run that went on without stopping: bit-identical
// when same (the saving layout), else to the equivalence tolerances (1e-6
// relative losses, 3e-6 norm-wise parameters).
func requireResumedLike(t *testing.T, name string, same bool, refLoss, loss []float64, want []float32, params map[string][]float32) {
	t.Helper()
	got := flatParams(params)
	if same {
		require.Equal(t, refLoss, loss, "losses at the saving layout")
		require.True(t, slices.Equal(want, got), "parameters at the saving layout differ")
	}
	t.Logf("losses %v (reference %v)", loss, refLoss)
	requireFollowsPlain(t, name, refLoss, loss, want, got, 1e-6, 3e-6)
}

// The comparison above would see a checkpoint that lost the optimizer
// state: resuming with fresh moments moves the parameters far past its
// tolerance.
func TestGPTTensorParallelCheckpointNeedsOptimizerState(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	dir := t.TempDir()
	r := tpRun{tp: 2, dp: 1, stage: 1}
	_, ref, err := tpSegment{r: r, save: dir, steps: 6, saveAt: 3}.run(t, corpus)
	require.NoError(t, err)
	// the same start, the optimizer state left out
	_, fresh, err := tpSegment{r: r, from: dir, load: deepgo.LoadOptions{SkipOptimizerStates: true}, first: 3, steps: 3}.run(t, corpus)
	require.NoError(t, err)
	d := relNorm(flatParams(ref), flatParams(fresh))
	t.Logf("without the optimizer state: param rel %.3g", d)
	assert.Greater(t, d, 100*3e-6)
}

// After Load, the parameters TP replicates must be the same on every TP
// rank: TP ranks that loaded different checkpoints (the same tag in two
// directories) fail on every rank, naming the first differing replicated
// parameter and the TP rank. TP ranks that found different tags fail the
// tag check.
func TestGPTTensorParallelLoadReplicatedMismatch(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	r := tpRun{tp: 2, dp: 1}
	a, b := t.TempDir(), t.TempDir()
	// WarmupLR's first two steps have learning rate 0: four steps apart
	_, _, err = tpSegment{r: r, save: a, steps: 4, saveAt: 4}.run(t, corpus)
	require.NoError(t, err)
	_, _, err = tpSegment{r: r, save: b, first: 5, steps: 4, saveAt: 4}.run(t, corpus) // other batches
	require.NoError(t, err)
	_, _, err = tpSegment{r: r, first: 4, loadDir: func(rank int) string { return []string{a, b}[rank] }}.run(t, corpus)
	require.Error(t, err)
	var me *checkpoint.ReplicaMismatchError
	require.True(t, errors.As(err, &me), "%v", err)
	t.Logf("same tag, different values: %v", err)
	assert.Equal(t, []int{1}, me.Ranks)
	assert.Equal(t, "transformer.wpe.weight", me.Tensor)
	assert.ErrorContains(t, err, "over the tensor-parallel group")

	// different tags: refused by the tag check, before anything changes
	c := t.TempDir()
	_, _, err = tpSegment{r: r, save: c, steps: 3, saveAt: 3}.run(t, corpus)
	require.NoError(t, err)
	_, _, err = tpSegment{r: r, first: 4, loadDir: func(rank int) string { return []string{a, c}[rank] }}.run(t, corpus)
	var mm *comm.MismatchError
	require.True(t, errors.As(err, &mm), "%v", err)
	t.Logf("different tags: %v", err)
	assert.ErrorContains(t, err, "global_step3")
}

// Under TP × DP a failed replica check reaches every rank at once: with
// ranks 0 and 2 (TP rank 0 of each data-parallel index) loading
// checkpoints whose values differ, their data group fails its check while
// ranks 1 and 3's passes; 1 and 3 must not then wait in the TP groups'
// comparison for peers that left (the run's timeout is 60 s), and every
// rank fails. Each rank records its error and returns nil: a failing rank
// would otherwise abort the in-process world and fail the others for it.
func TestGPTTensorParallelLoadVerdictReachesEveryRank(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	r := tpRun{tp: 2, dp: 2} // ZeRO 0: each data rank loads whole parameters (1-2 would re-gather them equal)
	a, b := t.TempDir(), t.TempDir()
	_, _, err = tpSegment{r: r, save: a, steps: 4, saveAt: 4}.run(t, corpus)
	require.NoError(t, err)
	_, _, err = tpSegment{r: r, save: b, first: 5, steps: 4, saveAt: 4}.run(t, corpus) // other batches
	require.NoError(t, err)
	start := time.Now()
	dirs := []string{a, a, b, a} // by world rank; data groups {0, 2} and {1, 3}
	errs := make([]error, 4)
	_, _, err = tpSegment{r: r, first: 4, loadDir: func(rank int) string { return dirs[rank] }, loadErrs: errs}.run(t, corpus)
	require.NoError(t, err)
	took := time.Since(start)
	for rank, err := range errs {
		require.Error(t, err, "rank %d", rank)
		t.Logf("rank %d: %v", rank, err)
	}
	var me *checkpoint.ReplicaMismatchError
	require.True(t, errors.As(errs[0], &me), "%v", errs[0])
	require.Less(t, took, 30*time.Second, "a rank waited for peers that had left")
}

var errCopy = errors.New("injected copy failure")

// Under TP a restore that fails on one TP rank alone (its backend's
// copies) fails its TP peer at once too: the peer's data group restored
// fine and would otherwise wait in the TP comparison until the timeout.
func TestGPTTensorParallelRestoreFailsOnOneRank(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	r := tpRun{tp: 2, dp: 1, stage: 1}
	dir := t.TempDir()
	_, _, err = tpSegment{r: r, save: dir, steps: 2, saveAt: 2}.run(t, corpus)
	require.NoError(t, err)
	var armed atomic.Bool
	errs := make([]error, 2)
	start := time.Now()
	_, _, err = tpSegment{r: r, from: dir, first: 2, loadErrs: errs, armed: &armed, opts: func(rank int, c comm.Comm) []deepgo.Option {
		if rank != 1 {
			return nil
		}
		return []deepgo.Option{deepgo.WithBackend(faultbe.CopyFault{Pooled: faultbe.Of(c), Armed: &armed, Err: errCopy})}
	}}.run(t, corpus)
	require.NoError(t, err)
	took := time.Since(start)
	for rank, err := range errs {
		t.Logf("rank %d: %v", rank, err)
	}
	require.Less(t, took, 30*time.Second, "rank 0 waited for its peer (timeout 60 s)")
	require.ErrorIs(t, errs[1], errCopy)
	require.ErrorContains(t, errs[0], "failed on rank 1")
}

// A TP checkpoint's parameters read back whole (checkpoint.ReadParam, what
// Consolidate exports) equal the run's unsharded parameters bit for bit,
// the fused q/k/v weights included, and Consolidate writes them: the
// data-parallel Engine's and the 3-D pipeline's (TP 2 × PP 2 × DP 2),
// whose stages keep their wte shard copies under mp_rank_XX names too and
// whose replicated parameters are saved once.
func TestGPTTensorParallelCheckpointConsolidates(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	for _, c := range []struct {
		name string
		pp   int
		run  func(dir string) (map[string][]float32, error)
	}{
		{"engine", 1, func(dir string) (map[string][]float32, error) {
			_, params, err := tpSegment{r: tpRun{tp: 2, dp: 2, stage: 2}, save: dir, steps: 4, saveAt: 4}.run(t, corpus)
			return params, err
		}},
		{"pipeline", 2, func(dir string) (map[string][]float32, error) {
			r := tppRun{tp: 2, pp: 2, dp: 2, stage: 1, micro: 2, sched: "1F1B", virtual: 1}
			_, params, err := tppSegment{r: r, save: dir, steps: 4, saveAt: 4}.run(corpus)
			return params, err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			params, err := c.run(dir)
			require.NoError(t, err)
			ck, err := checkpoint.Open(nil, dir, "")
			require.NoError(t, err)
			defer ck.Close()
			assert.Equal(t, 2, ck.Manifest.Topology["model"])
			assert.Equal(t, c.pp, ck.Manifest.Topology["pipe"])
			require.Len(t, ck.Manifest.Params, len(params))
			split := 0
			for _, p := range ck.Manifest.Params {
				if p.Split != nil {
					split++
				}
				full, err := ck.ReadParam(context.Background(), p)
				require.NoError(t, err)
				v, _ := full.Float32s()
				require.True(t, slices.Equal(params[p.Name], v), "%s differs from the run's unsharded value", p.Name)
				full.Free()
			}
			t.Logf("%d parameters, %d of them TP shards", len(params), split)
			assert.Positive(t, split)
			if c.pp > 1 {
				for _, tp := range []string{"00", "01"} {
					_, ok := ck.Lookup("fp32/mp_rank_" + tp + "/transformer.wte.weight@transformer.ln_f")
					assert.True(t, ok, "TP rank %s's copy of the wte shard on the last stage", tp)
				}
				// a replicated parameter is saved once, by TP rank 0
				_, ok := ck.Lookup("fp32/transformer.wpe.weight")
				assert.True(t, ok, "the replicated wpe")
				_, ok = ck.Lookup("fp32/mp_rank_01/transformer.wpe.weight")
				assert.False(t, ok, "TP rank 1 saved the replicated wpe")
			}
			require.NoError(t, ck.Consolidate(context.Background(), nil, filepath.Join(t.TempDir(), "model.safetensors")))
		})
	}
}
