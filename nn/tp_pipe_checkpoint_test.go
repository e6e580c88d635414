package nn_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tppSegment is one stretch of a 3-D training run over r's layout (the
// data-parallel Engine with TP when r.pp is 1): it loads from (unless
// ""), trains steps steps on the batches of steps first, first+1, ...,
// saving to save (unless "") after saveAt of them, and returns rank 0's
// losses and parameters unsharded over its TP group. The model starts from
// other initial values than the saved run's, so what follows a load is the
// checkpoint's.
type tppSegment struct {
	r                    tppRun
	from, save           string
	loadDir              func(rank int) string // each world rank's from, when set
	first, steps, saveAt int
}

func (s tppSegment) run(corpus *data.Tokens) ([]float64, map[string][]float32, error) {
	r := s.r
	losses := make([]float64, s.steps)
	var params map[string][]float32
	err := local.Run(context.Background(), r.tp*r.pp*r.dp, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(r.config(1.0)))
		if err != nil {
			return err
		}
		world, tc, d := c, comm.Comm(nil), 0
		if r.pp > 1 {
			if tc, err = deepgo.PipeTensorParallelGroup(ctx, c, r.pp, r.tp); err != nil {
				return err
			}
			d = (c.Rank() / r.tp) % r.dp
		} else {
			if world, tc, err = deepgo.TensorParallelGroups(ctx, c, r.tp); err != nil {
				return err
			}
			d = world.Rank()
		}
		defer tc.Close()
		gc := tpGPT(corpus.Vocab)
		gc.TP = nn.TP{Comm: tc, SequenceParallel: r.seq && r.tp > 1}
		g, err := nn.NewReadyGPT(gc, nil, eqSeed+1)
		if err != nil {
			return err
		}
		defer g.Free()
		tr, err := deepgo.Initialize(ctx, cfg, g, deepgo.WithComm(world), deepgo.WithTensorParallel(tc))
		if err != nil {
			return err
		}
		defer tr.Close()
		from := s.from
		if s.loadDir != nil {
			from = s.loadDir(c.Rank())
		}
		return resumeSegment(ctx, tr.(ckptTrainer), g, from, deepgo.LoadOptions{}, s.first, s.save, s.saveAt, func(off int, losses []float64) error {
			return trainMicroFrom(ctx, tr, corpus, losses, c.Rank() == 0, r.dp, d, r.micro, s.first+off)
		}, losses, c.Rank() == 0, &params)
	})
	return losses, params, err
}

// A 3-D checkpoint keeps the TP shards and loads at other layouts: saved
// by TP 2 × PP 2 (× 1 and × 2 data ranks), or by the Engine at TP 2, after
// N steps, it is loaded by
// fresh engines at TP 2 × PP 2, TP 1 × PP 2, TP 4 × PP 2, another data
// world, and by the data-parallel Engine at TP 1 and 2, which train M more
// steps. Their losses follow the run that went on without stopping to
// 1e-6 relative and their unsharded parameters to 3e-6 norm-wise (another
// layout changes float32 summation order only); at the saving layout they
// are bit-identical. gradient_clipping 1.0 clips every step, and AdamW's
// moments carry over, so a shard resharded wrong, or a replicated
// parameter or tied wte copy read from the wrong place, would show.
func TestGPTTensorPipelineCheckpointReshard(t *testing.T) {
	const n, m = 3, 3
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	base := tppRun{tp: 2, pp: 2, dp: 1, stage: 1, micro: 2, sched: "1F1B", virtual: 1}
	with := func(f func(*tppRun)) tppRun { r := base; f(&r); return r }
	// the data-parallel Engine's TP checkpoints load into the pipeline too
	saves := []tppRun{base, with(func(r *tppRun) { r.dp = 2 }), with(func(r *tppRun) { r.pp = 1; r.sched = "GPipe" })}
	loads := []tppRun{
		with(func(r *tppRun) { r.tp = 1 }),
		with(func(r *tppRun) { r.tp = 4; r.stage = 0 }),
		with(func(r *tppRun) { r.dp = 2; r.micro = 1 }),
		with(func(r *tppRun) { r.pp = 1; r.sched = "GPipe" }),
		with(func(r *tppRun) { r.pp = 1; r.tp = 1; r.sched = "GPipe" }),
	}
	if testing.Short() {
		saves, loads = saves[:1], []tppRun{loads[0], loads[3]}
	}
	for _, saved := range saves {
		dir := t.TempDir()
		all, refParams, err := tppSegment{r: saved, save: dir, steps: n + m, saveAt: n}.run(corpus)
		require.NoError(t, err, "saving at %v", saved)
		refLoss, want := all[n:], flatParams(refParams)
		for _, r := range append(loads, saved) {
			t.Run(fmt.Sprintf("saved-%v/load-%v", saved, r), func(t *testing.T) {
				loss, params, err := tppSegment{r: r, from: dir, first: n, steps: m}.run(corpus)
				require.NoError(t, err)
				requireResumedLike(t, fmt.Sprintf("%v → %v", saved, r), r == saved, refLoss, loss, want, params)
			})
		}
	}
}

// After a 3-D Load the parameters TP replicates must be the same on every
// TP rank of a stage: TP ranks that loaded different checkpoints (the same
// tag in two directories) fail on every rank, naming a replicated
// parameter and the TP rank; stages that loaded different checkpoints fail
// on the wte shard copies of the first and last stage (compared per TP
// rank).
func TestGPTTensorPipelineLoadReplicatedMismatch(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	r := tppRun{tp: 2, pp: 2, dp: 1, stage: 1, micro: 2, sched: "1F1B", virtual: 1}
	a, b := t.TempDir(), t.TempDir()
	_, _, err = tppSegment{r: r, save: a, steps: 3, saveAt: 3}.run(corpus)
	require.NoError(t, err)
	_, _, err = tppSegment{r: r, save: b, first: 5, steps: 3, saveAt: 3}.run(corpus) // other batches
	require.NoError(t, err)
	// TP rank 1 of each stage (odd world ranks) reads b
	_, _, err = tppSegment{r: r, first: 3, loadDir: func(rank int) string { return []string{a, b}[rank%2] }}.run(corpus)
	var me *checkpoint.ReplicaMismatchError
	require.True(t, errors.As(err, &me), "%v", err)
	t.Logf("same tag, different values: %v", err)
	assert.Equal(t, []int{1}, me.Ranks)
	assert.ErrorContains(t, err, "over its tensor-parallel group")

	// stage 1 (world ranks 2 and 3) reads b: its TP ranks agree, its wte
	// shards differ from stage 0's
	_, _, err = tppSegment{r: r, first: 3, loadDir: func(rank int) string { return []string{a, b}[rank/2] }}.run(corpus)
	var tm *deepgo.TiedMismatchError
	require.True(t, errors.As(err, &tm), "%v", err)
	t.Logf("stages of different checkpoints: %v", err)
	assert.Equal(t, "transformer.wte.weight", tm.Param)
	assert.Equal(t, []int{1}, tm.Stages)
}
