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
)

const loadOptsConfig = `{"train_micro_batch_size_per_gpu": 4,
	"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
	"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_max_lr": 0.01}},
	"zero_optimization": {"stage": 1}}`

// trained is an engine over an MLP of sizes trained for steps steps.
func trained(t *testing.T, seed uint64, steps int, sizes ...int) *deepgo.Engine {
	t.Helper()
	cfg, err := config.Parse([]byte(loadOptsConfig))
	if err != nil {
		t.Fatal(err)
	}
	e, err := initEngine(context.Background(), cfg, testmodel.NewMLP(seed, sizes...))
	if err != nil {
		t.Fatal(err)
	}
	data := testmodel.NewDataset(5, 32, sizes[0], sizes[len(sizes)-1])
	for s := range steps {
		if _, err := e.TrainBatch(context.Background(), []model.MicroBatch{data.Micro(s, 4, 0, 4)}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// Each LoadOptions field leaves out what DeepSpeed's load_checkpoint
// keyword leaves out, and LoadResult says what was loaded.
func TestLoadOptions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := trained(t, 1, 4, 6, 8, 3)
	if err := src.Save(ctx, dir, deepgo.SaveOptions{Tag: "four", ClientState: []byte(`{"k":1}`)}); err != nil {
		t.Fatal(err)
	}
	saved, err := src.Parameters(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
			if err != nil {
				t.Fatal(err)
			}
			if res.Tag != "four" || !strings.HasSuffix(res.Path, "four") || string(res.ClientState) != `{"k":1}` {
				t.Errorf("result %+v, want tag four and the client state", res)
			}
			got, err := e.Parameters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for n, v := range saved {
				if !slices.Equal(got[n], v) {
					t.Errorf("%s differs from the checkpoint", n)
				}
			}
			if e.GlobalSteps() != c.steps {
				t.Errorf("global steps %d, want %d", e.GlobalSteps(), c.steps)
			}
			if want := map[bool]float64{true: savedLR, false: lr0}[c.lrSaved]; e.LR() != want {
				t.Errorf("LR %v, want %v", e.LR(), want)
			}
			state, _ := e.ZeRO().OptimizerState()
			if loaded := len(state) > 0; loaded != c.optimState {
				t.Errorf("optimizer state loaded %v, want %v", loaded, c.optimState)
			}
		})
	}
}

// NonStrict loads what matches and lists what does not; strict refuses.
func TestLoadNonStrict(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := trained(t, 1, 2, 6, 8, 3) // fc1, fc2
	if err := src.Save(ctx, dir, deepgo.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	saved, _ := src.Parameters(ctx)
	src.Close()

	// A model with a third layer: fc3 is missing from the checkpoint.
	e := trained(t, 2, 0, 6, 8, 3, 3)
	defer e.Close()
	before, _ := e.Parameters(ctx)
	if _, err := e.Load(ctx, dir, deepgo.LoadOptions{}); err == nil || !strings.Contains(err.Error(), `has no parameter "fc3.weight"`) {
		t.Fatalf("strict load into a larger model: %v, want an error naming fc3.weight", err)
	}
	res, err := e.Load(ctx, dir, deepgo.LoadOptions{NonStrict: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Missing, []string{"fc3.weight", "fc3.bias"}) || len(res.Unexpected) != 0 {
		t.Errorf("missing %v, unexpected %v; want fc3's two parameters missing", res.Missing, res.Unexpected)
	}
	got, _ := e.Parameters(ctx)
	for n := range got {
		want := saved[n]
		if strings.HasPrefix(n, "fc3.") {
			want = before[n]
		}
		if !slices.Equal(got[n], want) {
			t.Errorf("%s: not what NonStrict should leave", n)
		}
	}

	// A smaller model: the checkpoint's fc2 is unexpected.
	small := trained(t, 3, 0, 6, 8)
	defer small.Close()
	if _, err := small.Load(ctx, dir, deepgo.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "parameters the model lacks: fc2.bias, fc2.weight") {
		t.Fatalf("strict load into a smaller model: %v", err)
	}
	res, err = small.Load(ctx, dir, deepgo.LoadOptions{NonStrict: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Missing) != 0 || !slices.Equal(res.Unexpected, []string{"fc2.bias", "fc2.weight"}) {
		t.Errorf("missing %v, unexpected %v; want fc2's two parameters unexpected", res.Missing, res.Unexpected)
	}
}
