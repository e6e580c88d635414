package nn_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipeFreezes are the pipeline tests' frozen sets: the tied wte (on the
// first and last stage) with a block's attention weight and ln_f's bias;
// and wpe with a LayerNorm weight and an MLP bias of blocks on both
// stages.
var pipeFreezes = []string{
	`wte|h\.1\.attn\.c_attn\.weight|ln_f\.bias`,
	`wpe|h\.0\.ln_1\.weight|h\.5\.mlp\.c_fc\.bias`,
}

// pipeFrozenCurve is pipeCurve with the parameters freeze matches frozen,
// saving to save (unless "", with so) after the steps and loading from
// load (unless "") before them, the model initialised from seed.
func pipeFrozenCurve(r pipeRun, freeze string, seed uint64, steps int, corpus *data.Tokens, load, save string, so deepgo.SaveOptions) ([]float64, map[string][]float32, []map[string][]float32, error) {
	losses := make([]float64, steps)
	var params map[string][]float32
	tied := make([]map[string][]float32, r.pp)
	err := local.Run(context.Background(), r.pp*r.dp, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(r.config(1.0)))
		if err != nil {
			return err
		}
		g, err := nn.NewReadyGPT(pipeGPT(corpus.Vocab), nil, seed)
		if err != nil {
			return err
		}
		defer g.Free()
		freezeGPT(g, freeze)
		tr, err := deepgo.Initialize(ctx, cfg, g, deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer tr.Close()
		pe := tr.(*deepgo.PipeEngine)
		first := 0
		if load != "" {
			if _, err := tr.Load(ctx, load, deepgo.LoadOptions{}); err != nil {
				return err
			}
			first = tr.GlobalSteps()
		}
		d := c.Rank() % r.dp
		if err := trainMicroFrom(ctx, tr, corpus, losses, c.Rank() == 0, r.dp, d, r.micro, first); err != nil {
			return err
		}
		if save != "" {
			if err := tr.Save(ctx, save, so); err != nil {
				return err
			}
		}
		if err := pipeResults(ctx, c, pe, r.dp, &params, tied); err != nil {
			return err
		}
		// stage 0 holds a frozen wte or wpe: Memory counts it
		if m := pe.Memory(); c.Rank() == 0 && m.Frozen <= 0 {
			return fmt.Errorf("stage 0: Memory().Frozen %d", m.Frozen)
		}
		return nil
	})
	return losses, params, tied, err
}

// TestGPTPipelineFrozen: the GPT with frozen parameters (pipeFreezes: the
// tied wte, or wpe, with parameters of blocks on every stage) trained
// through the pipeline engine (1F1B, GPipe and interleaved; 2 and 4
// stages, 1 and 2 data-parallel ranks at ZeRO 1) follows plainGPTFrozen,
// the plain loop whose clipping and AdamW see only the trainable
// parameters, to the pipeline equivalence test's tolerances (1e-6 losses,
// 3e-6 parameters) at gradient_clipping 1.0; the frozen parameters keep
// their initial values bit for bit, the stages' copies of a frozen wte
// with them. Saved after 2 steps and resumed by engines initialised from
// other values, it trains the next 2 as the run that went on, bit for bit.
func TestGPTPipelineFrozen(t *testing.T) {
	const steps = 4
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	batch := func(step int) model.TokenBatch { return pipeMicro(corpus, step, 1, 0, 1, 0) }
	for _, freeze := range pipeFreezes {
		re := regexp.MustCompile(freeze)
		plainLoss, plain, _ := plainGPTFrozen(t, pipeGPT(corpus.Vocab), pipeSeed, steps, 1.0, batch, re)
		_, initial, _ := plainGPTFrozen(t, pipeGPT(corpus.Vocab), pipeSeed, 0, 1.0, nil, re)
		want := flatParams(plain)
		for _, r := range []pipeRun{{2, 1, 4, "1F1B", 1, 0}, {2, 2, 2, "GPipe", 1, 0}, {4, 1, 4, "Interleaved", 2, 0}, {2, 2, 4, "1F1B", 1, 1}} {
			t.Run(fmt.Sprintf("%v-%s", r, freeze), func(t *testing.T) {
				loss, got, tied, err := pipeFrozenCurve(r, freeze, pipeSeed, steps, corpus, "", "", deepgo.SaveOptions{})
				require.NoError(t, err)
				requireFollowsPlain(t, r.String(), plainLoss, loss, want, flatParams(got), 1e-6, 3e-6)
				requireFrozenUnmoved(t, re, initial, got)
				wte := "transformer.wte.weight"
				require.NotNil(t, tied[0][wte], "stage 0 holds no tied wte")
				assert.Equal(t, tied[0][wte], tied[r.pp-1][wte], "the stages' copies of the tied wte differ")
				dir := t.TempDir()
				_, _, _, err = pipeFrozenCurve(r, freeze, pipeSeed, steps/2, corpus, "", dir, deepgo.SaveOptions{})
				require.NoError(t, err)
				resumed, params, _, err := pipeFrozenCurve(r, freeze, pipeSeed+1, steps/2, corpus, dir, "", deepgo.SaveOptions{})
				require.NoError(t, err)
				require.Equal(t, loss[steps/2:], resumed)
				require.Equal(t, flatParams(got), flatParams(params))
			})
		}
	}
}

// TestGPTTensorPipelineFrozen: TP 2 in each of 2 pipeline stages (1 and 2
// data-parallel ranks, ZeRO 0 and 1, 1F1B and the interleaved schedule,
// with Megatron's sequence parallelism) with tpFreezes' parameters frozen
// (the tied wte's vocabulary-parallel shards on both stages, column- and
// row-parallel weights, replicated LayerNorm parameters; or wpe) follows
// plainGPTFrozen to 1e-6 losses and 3e-6 parameters, the frozen ones
// bit-identical to their initial values, the stages' wte shards equal.
func TestGPTTensorPipelineFrozen(t *testing.T) {
	const steps = 3
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	batch := func(step int) model.TokenBatch { return pipeMicro(corpus, step, 1, 0, 1, 0) }
	for _, freeze := range tpFreezes {
		re := regexp.MustCompile(freeze)
		plainLoss, plain, _ := plainGPTFrozen(t, tpGPT(corpus.Vocab), eqSeed, steps, 1.0, batch, re)
		_, initial, _ := plainGPTFrozen(t, tpGPT(corpus.Vocab), eqSeed, 0, 1.0, nil, re)
		want := flatParams(plain)
		for _, r := range []tppRun{
			{tp: 2, pp: 2, dp: 1, stage: 1, micro: 2, sched: "1F1B", virtual: 1},
			{tp: 2, pp: 2, dp: 2, stage: 0, micro: 2, sched: "Interleaved", virtual: 2, seq: true},
		} {
			r.freeze = freeze
			t.Run(fmt.Sprintf("%v-%s", r, freeze), func(t *testing.T) {
				loss, got, tied := tppCurve(t, r, steps, 1.0, corpus)
				requireFollowsPlain(t, r.String(), plainLoss, loss, want, flatParams(got), 1e-6, 3e-6)
				requireFrozenUnmoved(t, re, initial, got)
				require.NotNil(t, tied[0])
				assert.Equal(t, tied[0], tied[1], "the stages' wte shards differ")
			})
		}
	}
}
