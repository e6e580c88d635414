package nn_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/nn"
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
		gc.TP = nn.TP{Comm: tc}
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
		return resumeSegment(ctx, tr.(ckptTrainer), g, s.from, deepgo.LoadOptions{}, s.first, s.save, s.saveAt, func(off int, losses []float64) error {
			return trainMicroFrom(ctx, tr, corpus, losses, c.Rank() == 0, r.dp, d, r.micro, s.first+off)
		}, losses, c.Rank() == 0, &params)
	})
	return losses, params, err
}

// A 3-D checkpoint keeps the TP shards and loads at other layouts: saved
// by TP 2 × PP 2 (× 1 and × 2 data ranks) after N steps, it is loaded by
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
	saves := []tppRun{base, with(func(r *tppRun) { r.dp = 2 })}
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
