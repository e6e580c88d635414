package deepgo_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pipeline engine frees the initial values a model donates, once
// copied, and clears Donate, as the data-parallel engine does
// (Initialize's contract): the whole model's parameters, each moved to a
// storage of its own and donated, are freed by each rank's Initialize (its
// stage's once copied, the other stages' unused), and training gives the
// same bits as without donating.
func TestPipelineFreesDonated(t *testing.T) {
	const vocab, seqLen, steps = 32, 16, 3
	src, err := data.NewMarkov(vocab, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(20_000, 4), Vocab: vocab}
	cfgJSON := pipeDevCase{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1}.config()
	run := func(donate bool) []float64 {
		var losses []float64
		err := newWorld(context.Background(), 2, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
			cfg, err := config.Parse([]byte(cfgJSON))
			if err != nil {
				return err
			}
			g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 32, Vocab: vocab, SeqLen: seqLen}, nil, 1)
			if err != nil {
				return err
			}
			defer g.Free()
			// the GPT's parameters are views of one flat buffer, which
			// cannot be donated: each gets a storage of its own
			var given []*tensor.Tensor
			var params []*model.Param
			for _, m := range g.Modules() {
				for _, p := range m.Params() {
					cp, err := tensor.Empty(p.Data.DType(), p.Data.Shape()...)
					if err != nil {
						return err
					}
					src, _ := p.Data.Float32s()
					dst, _ := cp.Float32s()
					copy(dst, src)
					p.Data, p.Donate = cp, donate
					given, params = append(given, cp), append(params, p)
				}
			}
			tr, err := deepgo.Initialize(ctx, cfg, g, opts...)
			if err != nil {
				return err
			}
			defer tr.Close()
			for i, p := range params {
				if donate != given[i].Storage().Freed() {
					return fmt.Errorf("rank %d: %s: donated %v, its initial value freed %v", c.Rank(), p.Name, donate, given[i].Storage().Freed())
				}
				if p.Donate {
					return fmt.Errorf("rank %d: %s: Donate still set after Initialize", c.Rank(), p.Name)
				}
				if !donate {
					given[i].Free()
				}
			}
			for step := range steps {
				mbs := make([]model.MicroBatch, 2)
				for i := range mbs {
					k := (step*2 + i) * 2
					mbs[i] = corpus.MakeBatch([]int{k, k + 1}, seqLen).MicroBatch()
				}
				loss, err := tr.TrainBatch(ctx, mbs)
				if err != nil {
					return err
				}
				if c.Rank() == 0 {
					losses = append(losses, loss)
				}
			}
			return nil
		})
		require.NoError(t, err, "donate %v", donate)
		return losses
	}
	want, got := run(false), run(true)
	require.Len(t, got, steps)
	for i := range want {
		assert.Equal(t, math.Float64bits(want[i]), math.Float64bits(got[i]), "loss of step %d: %v vs %v", i, want[i], got[i])
	}
}
