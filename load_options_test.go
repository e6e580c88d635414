package deepgo_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const loadOptsConfig = `{"train_micro_batch_size_per_gpu": 4,
	"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
	"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_max_lr": 0.01}},
	"zero_optimization": {"stage": 1}}`

// trained is an engine over an MLP of sizes trained for steps steps.
func trained(t *testing.T, seed uint64, steps int, sizes ...int) *deepgo.Engine {
	t.Helper()
	cfg, err := config.Parse([]byte(loadOptsConfig))
	require.NoError(t, err)
	e, err := initEngine(context.Background(), cfg, testmodel.NewMLP(seed, sizes...))
	require.NoError(t, err)
	data := testmodel.NewDataset(5, 32, sizes[0], sizes[len(sizes)-1])
	for s := range steps {
		_, err := e.TrainBatch(context.Background(), []model.MicroBatch{data.Micro(s, 4, 0, 4)})
		require.NoError(t, err)
	}
	return e
}

// Each LoadOptions field leaves out what DeepSpeed's load_checkpoint
// keyword leaves out, and LoadResult says what was loaded.
func TestLoadOptions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := trained(t, 1, 4, 6, 8, 3)
	require.NoError(t, src.Save(ctx, dir, deepgo.SaveOptions{Tag: "four", ClientState: []byte(`{"k":1}`)}))
	saved, err := src.Parameters(ctx)
	require.NoError(t, err)
	savedLR := src.LR()
	src.Close()

	cases := []struct {
		name                string
		opts                deepgo.LoadOptions
		steps               int  // GlobalSteps after the load
		lrSaved, optimState bool // LR as saved (else step 0's), moments loaded
	}{
		{"everything", deepgo.LoadOptions{}, 4, true, true},
		{"module only", deepgo.LoadOptions{ModuleOnly: true}, 0, false, false},
		{"skip optimizer", deepgo.LoadOptions{SkipOptimizerStates: true}, 4, true, false},
		{"skip scheduler", deepgo.LoadOptions{SkipLRSchedulerStates: true}, 4, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := trained(t, 2, 0, 6, 8, 3) // other initial weights, no step
			defer e.Close()
			lr0 := e.LR()
			res, err := e.Load(ctx, dir, c.opts)
			require.NoError(t, err)
			assert.Equal(t, "four", res.Tag, "result %+v", res)
			assert.True(t, strings.HasSuffix(res.Path, "four"), "result %+v: path", res)
			assert.Equal(t, `{"k":1}`, string(res.ClientState), "result %+v: client state", res)
			got, err := e.Parameters(ctx)
			require.NoError(t, err)
			for n, v := range saved {
				assert.True(t, slices.Equal(got[n], v), "%s differs from the checkpoint", n)
			}
			assert.Equal(t, c.steps, e.GlobalSteps(), "global steps")
			assert.Equal(t, map[bool]float64{true: savedLR, false: lr0}[c.lrSaved], e.LR(), "LR")
			state, _ := e.ZeRO().OptimizerState()
			assert.Equal(t, c.optimState, len(state) > 0, "optimizer state loaded")
		})
	}
}

// NonStrict loads what matches and lists what does not; strict refuses.
func TestLoadNonStrict(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := trained(t, 1, 2, 6, 8, 3) // fc1, fc2
	require.NoError(t, src.Save(ctx, dir, deepgo.SaveOptions{}))
	saved, _ := src.Parameters(ctx)
	src.Close()

	// A model with a third layer: fc3 is missing from the checkpoint.
	e := trained(t, 2, 0, 6, 8, 3, 3)
	defer e.Close()
	before, _ := e.Parameters(ctx)
	_, err := e.Load(ctx, dir, deepgo.LoadOptions{})
	require.ErrorContains(t, err, `has no parameter "fc3.weight"`, "strict load into a larger model")
	res, err := e.Load(ctx, dir, deepgo.LoadOptions{NonStrict: true})
	require.NoError(t, err)
	assert.True(t, slices.Equal(res.Missing, []string{"fc3.weight", "fc3.bias"}), "missing %v; want fc3's two parameters", res.Missing)
	assert.Empty(t, res.Unexpected, "unexpected")
	got, _ := e.Parameters(ctx)
	for n := range got {
		want := saved[n]
		if strings.HasPrefix(n, "fc3.") {
			want = before[n]
		}
		assert.True(t, slices.Equal(got[n], want), "%s: not what NonStrict should leave", n)
	}

	// A smaller model: the checkpoint's fc2 is unexpected.
	small := trained(t, 3, 0, 6, 8)
	defer small.Close()
	_, err = small.Load(ctx, dir, deepgo.LoadOptions{})
	require.ErrorContains(t, err, "parameters the model lacks: fc2.bias, fc2.weight", "strict load into a smaller model")
	res, err = small.Load(ctx, dir, deepgo.LoadOptions{NonStrict: true})
	require.NoError(t, err)
	assert.Empty(t, res.Missing, "missing")
	assert.True(t, slices.Equal(res.Unexpected, []string{"fc2.bias", "fc2.weight"}), "unexpected %v; want fc2's two parameters", res.Unexpected)

}
