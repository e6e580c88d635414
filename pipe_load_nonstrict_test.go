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
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nonStrictRun is what one rank of a pipeline saw in TestPipelineLoadNonStrict.
type nonStrictRun struct {
	strict        error                // the strict Load's error
	res           deepgo.LoadResult    // the NonStrict Load's result
	before, after map[string][]float32 // the parameters around the NonStrict Load
	loss          float64              // a TrainBatch after it
}

// TestPipelineLoadNonStrict: DeepSpeed's load_module_strict=False on the
// pipeline engine. A 2-stage × 2-data pipeline GPT of 2 blocks trains 2
// steps and saves; a 3-block one (a block the checkpoint lacks) and a
// 1-block one (a block the model lacks), each after a step of its own,
// load it. Strictly, both refuse, naming the parameters; NonStrict, every
// rank lists the same Missing (the third block's, in model order) or
// Unexpected (the second block's, sorted), the parameters the checkpoint
// has take its values, the others keep theirs, and training goes on. On
// the CPU and the simulated device with kernel delays, which agree bit
// for bit.
func TestPipelineLoadNonStrict(t *testing.T) {
	const pp, dp = 2, 2
	mk, err := data.NewMarkov(16, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(4000, 4), Vocab: 16}
	cfgJSON := `{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "pipeline_model_parallel_size": 2,
		"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`
	batch := func(rank, step int) []model.MicroBatch {
		mbs := make([]model.MicroBatch, 2)
		for i := range mbs {
			k := 8*step + 4*(rank%dp) + 2*i
			mbs[i] = corpus.MakeBatch([]int{k, k + 1}, 8).MicroBatch()
		}
		return mbs
	}
	// pipe runs fn on every rank of a pipeline of the GPT with layers blocks
	pipe := func(dev string, layers int, fn func(ctx context.Context, rank int, tr deepgo.Trainer) error) error {
		return worldFor(dev)(context.Background(), pp*dp, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
			gc := nn.GPTConfig{Layers: layers, Heads: 2, Width: 8, Vocab: 16, SeqLen: 8}
			return withGPTOpts(ctx, cfgJSON, gc, uint64(layers), asIsGPT, opts, func(tr deepgo.Trainer) error {
				return fn(ctx, c.Rank(), tr)
			})
		})
	}
	block := func(i int) func(string) bool {
		return func(n string) bool { return strings.HasPrefix(n, fmt.Sprintf("transformer.h.%d.", i)) }
	}
	var cpu map[int][pp * dp]nonStrictRun
	for _, dev := range []string{"", "sim+delay"} {
		t.Run(devName(dev), func(t *testing.T) {
			dir := t.TempDir()
			var saved map[string][]float32
			err := pipe(dev, 2, func(ctx context.Context, rank int, tr deepgo.Trainer) error {
				for s := range 2 {
					if _, err := tr.TrainBatch(ctx, batch(rank, s)); err != nil {
						return err
					}
				}
				if err := tr.Save(ctx, dir, deepgo.SaveOptions{}); err != nil {
					return err
				}
				p, err := tr.Parameters(ctx)
				if rank == 0 {
					saved = p
				}
				return err
			})
			require.NoError(t, err, "the 2-block pipeline")
			runs := map[int][pp * dp]nonStrictRun{}
			for _, layers := range []int{3, 1} {
				var got [pp * dp]nonStrictRun
				var mu sync.Mutex
				err := pipe(dev, layers, func(ctx context.Context, rank int, tr deepgo.Trainer) error {
					var r nonStrictRun
					if _, err := tr.TrainBatch(ctx, batch(rank, 5)); err != nil {
						return err
					}
					var err error
					if r.before, err = tr.Parameters(ctx); err != nil {
						return err
					}
					_, r.strict = tr.Load(ctx, dir, deepgo.LoadOptions{})
					if r.res, err = tr.Load(ctx, dir, deepgo.LoadOptions{NonStrict: true}); err != nil {
						return err
					}
					if r.after, err = tr.Parameters(ctx); err != nil {
						return err
					}
					if r.loss, err = tr.TrainBatch(ctx, batch(rank, 2)); err != nil {
						return err
					}
					mu.Lock()
					got[rank] = r
					mu.Unlock()
					return nil
				})
				require.NoError(t, err, "the %d-block pipeline", layers)
				runs[layers] = got
				var names []string
				for n := range saved {
					if block(1)(n) {
						names = append(names, n)
					}
				}
				slices.Sort(names)
				for rank, r := range got {
					if layers == 3 {
						require.ErrorContains(t, r.strict, "the checkpoint lacks parameters of the model: transformer.h.2.", "rank %d", rank)
						assert.NotEmpty(t, r.res.Missing, "rank %d", rank)
						for _, n := range r.res.Missing {
							assert.True(t, block(2)(n), "rank %d: missing %s", rank, n)
						}
						assert.Empty(t, r.res.Unexpected, "rank %d", rank)
					} else {
						require.ErrorContains(t, r.strict, "the checkpoint has parameters the model lacks: "+strings.Join(names, ", "), "rank %d", rank)
						assert.Empty(t, r.res.Missing, "rank %d", rank)
						assert.Equal(t, names, r.res.Unexpected, "rank %d", rank)
					}
					assert.Equal(t, got[0].res.Missing, r.res.Missing, "rank %d's Missing, rank 0's", rank)
					require.Len(t, r.after, len(r.before), "rank %d", rank)
					for n, v := range r.after {
						want, ok := saved[n]
						if !ok {
							want = r.before[n]
							require.True(t, block(2)(n), "rank %d: %s is neither saved nor the new block's", rank, n)
						}
						require.Equal(t, want, v, "rank %d: %s after the NonStrict Load", rank, n)
					}
					assert.False(t, math.IsNaN(r.loss) || math.IsInf(r.loss, 0), "rank %d: loss %v after the load", rank, r.loss)
				}
			}
			if dev == "" {
				cpu = runs
				return
			}
			for layers, got := range runs {
				for rank, r := range got {
					assert.Equal(t, math.Float64bits(cpu[layers][rank].loss), math.Float64bits(r.loss), "%d blocks, rank %d: the loss after the load, cpu vs %s", layers, rank, devName(dev))
				}
			}
		})
	}
}
