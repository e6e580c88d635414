package nn_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The GPT's parameters carry the names Hugging Face's GPT2LMHeadModel
// gives them (named_parameters: the tied lm_head.weight is wte), also in
// the engine's Parameters.
func TestGPTNamesAreHuggingFaces(t *testing.T) {
	g, err := nn.NewGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 8, Vocab: 16, SeqLen: 8})
	require.NoError(t, err)
	want := []string{"transformer.wte.weight", "transformer.wpe.weight"}
	for _, l := range []string{"0", "1"} {
		for _, p := range []string{"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"} {
			want = append(want, "transformer.h."+l+"."+p+".weight", "transformer.h."+l+"."+p+".bias")
		}
	}
	want = append(want, "transformer.ln_f.weight", "transformer.ln_f.bias")
	var got []string
	for _, p := range g.Params() {
		got = append(got, p.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got, "GPT parameter names")
}

// A checkpoint written before the names changed loads into today's GPT,
// and training on from it gives what the old version computed. The
// expected values were computed with OpenBLAS's generic (Prescott) sgemm
// kernels; a CPU's own kernels sum the products in another order, so they
// are compared to a tolerance: 1e-4 on parameters of ~0.02, far below what
// a wrong name mapping (another parameter's values) would change, and above
// the drift of the attention key bias, whose gradient is only rounding
// noise (softmax ignores a shift shared by all keys) that Adam scales up.
func TestGPTLoadsCheckpointFromBeforeTheNames(t *testing.T) {
	const dir = "testdata/gpt-ckpt-before-names"
	raw, err := os.ReadFile(dir + "/expect.json")
	require.NoError(t, err)
	var want struct {
		Losses []float64            `json:"losses_after_resume"`
		Params map[string][]float32 `json:"params_after"`
	}
	require.NoError(t, json.Unmarshal(raw, &want))
	const V, T = 16, 8
	m, err := data.NewMarkov(V, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: m.Generate(4000, 4), Vocab: V}
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
		"zero_optimization": {"stage": 1},
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}}}`))
	require.NoError(t, err)
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 1, Heads: 2, Width: 8, Vocab: V, SeqLen: T}, be, 99) // other weights than saved
	require.NoError(t, err)
	defer g.Free()
	ctx := context.Background()
	tr, err := deepgo.Initialize(ctx, cfg, g, deepgo.WithBackend(be))
	require.NoError(t, err)
	defer tr.Close()
	res, err := tr.Load(ctx, dir, deepgo.LoadOptions{})
	require.NoError(t, err)
	require.Equal(t, "step3", res.Tag, "loaded %+v", res)
	require.True(t, strings.HasSuffix(res.Path, "step3"), "loaded %+v: path", res)
	require.Equal(t, 3, tr.GlobalSteps(), "loaded %+v: step", res)
	for s := 3; s < 5; s++ {
		b := corpus.MakeBatch([]int{2 * s, 2*s + 1}, T)
		loss, err := tr.TrainBatch(ctx, []model.MicroBatch{b.MicroBatch()})
		require.NoError(t, err)
		assert.InEpsilon(t, want.Losses[s-3], loss, 1e-5, "step %d: loss (expected: what the version that saved computed)", s)
	}
	got, err := tr.Parameters(ctx)
	require.NoError(t, err)
	require.Equal(t, len(want.Params), len(got), "parameter count (expected: the checkpoint's version's)")
	for old, w := range want.Params {
		// old names were "<module>.<name>", the tables without ".weight"
		name := old[strings.Index(old, ".transformer.")+1:]
		if !strings.Contains(name, ".h.") && !strings.Contains(name, "ln_f") {
			name += ".weight"
		}
		v, ok := got[name]
		if !assert.True(t, ok, "no parameter %q (was %q)", name, old) {
			continue
		}
		if assert.Len(t, v, len(w), name) {
			for i := range w {
				assert.InDelta(t, w[i], v[i], 1e-4, "%s[%d] differs from what the old version computed", name, i)
			}
		}
	}
}
