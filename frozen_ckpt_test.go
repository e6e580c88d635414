package deepgo_test

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// frozenSave trains r (3 steps) and saves it into dir with opts; it
// returns rank 0's parameters as saved.
func frozenSave(t *testing.T, r run, dir string, opts deepgo.SaveOptions) map[string][]float32 {
	t.Helper()
	r.steps = 3
	r.after = func(ctx context.Context, _ int, e *deepgo.Engine) error { return e.Save(ctx, dir, opts) }
	res, err := train(t, r)
	require.NoError(t, err)
	return res.params
}

// frozenLoad builds r's engine on a model initialized from seed 7 (other
// values than the saved run's), loads dir into it with opts and returns
// rank 0's parameters and LoadResult, and the parameters before the load.
func frozenLoad(t *testing.T, r run, dir string, opts deepgo.LoadOptions) (before, after map[string][]float32, res deepgo.LoadResult, err error) {
	t.Helper()
	var mu sync.Mutex
	err = worldFor(r.dev)(context.Background(), r.world, func(ctx context.Context, c comm.Comm, o []deepgo.Option) error {
		cfg, err := config.Parse([]byte(r.config()))
		if err != nil {
			return err
		}
		m := testmodel.NewMLP(7, r.layers()...)
		freezeMLP(m, r.freeze)
		e, err := initEngine(ctx, cfg, m, o...)
		if err != nil {
			m.FreeUndonated()
			return err
		}
		defer e.Close()
		b, err := e.Parameters(ctx)
		if err != nil {
			return err
		}
		lr, err := e.Load(ctx, dir, opts)
		if err != nil {
			return err
		}
		a, err := e.Parameters(ctx)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			mu.Lock()
			before, after, res = b, a, lr
			mu.Unlock()
		}
		return nil
	})
	return before, after, res, err
}

// TestFrozenCheckpoint: Save writes the frozen values and Load restores
// them bit for bit (into another data-parallel world and stage too);
// ExcludeFrozen leaves them out, and a Load then keeps the model's own
// values without NonStrict; a parameter saved trainable loads into a
// model where it is frozen (its master rounded to the working dtype); one
// saved frozen into a model where it is trainable is refused, naming it,
// unless ModuleOnly.
func TestFrozenCheckpoint(t *testing.T) {
	frozen := regexp.MustCompile(freezeMixed)
	for _, prec := range []string{"", "bf16"} {
		saved := run{stage: 2, world: 2, gas: 1, precision: prec, freeze: freezeMixed}
		into := run{stage: 3, world: 1, gas: 1, precision: prec, freeze: freezeMixed}
		t.Run(saved.String()+"/round-trip", func(t *testing.T) {
			dir := t.TempDir()
			want := frozenSave(t, saved, dir, deepgo.SaveOptions{})
			_, got, _, err := frozenLoad(t, into, dir, deepgo.LoadOptions{})
			require.NoError(t, err)
			require.NoError(t, bitEqual(want, got))
			ck, err := checkpoint.Open(nil, dir, "")
			require.NoError(t, err)
			defer ck.Close()
			out := filepath.Join(t.TempDir(), "model.safetensors")
			require.NoError(t, ck.Consolidate(context.Background(), nil, out))
			cons, _ := readConsolidated(t, out)
			require.NoError(t, bitEqual(want, cons), "consolidated, frozen parameters included")
		})
		t.Run(saved.String()+"/exclude", func(t *testing.T) {
			dir := t.TempDir()
			want := frozenSave(t, saved, dir, deepgo.SaveOptions{ExcludeFrozen: true})
			before, got, res, err := frozenLoad(t, into, dir, deepgo.LoadOptions{})
			require.NoError(t, err)
			assert.Empty(t, res.Missing)
			for name, v := range got {
				if frozen.MatchString(name) {
					require.Equal(t, before[name], v, "%s keeps the model's value", name)
					require.NotEqual(t, want[name], v, "%s", name)
				} else {
					require.Equal(t, want[name], v, "%s", name)
				}
			}
			assert.Contains(t, res.Notes[len(res.Notes)-1], "saved with ExcludeFrozen")
			// trainable now: the checkpoint has no value for it, and says why
			thawed := into
			thawed.freeze = ""
			_, _, _, err = frozenLoad(t, thawed, dir, deepgo.LoadOptions{ModuleOnly: true})
			require.ErrorIs(t, err, deepgo.ErrSavedFrozen)
			require.ErrorContains(t, err, "left out (SaveOptions.ExcludeFrozen)")
			ck, err := checkpoint.Open(nil, dir, "")
			require.NoError(t, err)
			defer ck.Close()
			for _, p := range ck.Manifest.Params {
				require.False(t, frozen.MatchString(p.Name), "%s in a checkpoint saved with ExcludeFrozen", p.Name)
			}
		})
		t.Run(saved.String()+"/trainable-to-frozen", func(t *testing.T) {
			dir := t.TempDir()
			from := saved
			from.freeze = ""
			want := frozenSave(t, from, dir, deepgo.SaveOptions{})
			_, got, _, err := frozenLoad(t, into, dir, deepgo.LoadOptions{})
			require.NoError(t, err)
			for name, v := range got {
				w := want[name]
				if frozen.MatchString(name) && prec == "bf16" {
					w = slices.Clone(w)
					for i := range w {
						w[i] = tensor.ToHalfPrecision(tensor.BFloat16, w[i])
					}
				}
				require.Equal(t, w, v, "%s", name)
			}
		})
		t.Run(saved.String()+"/frozen-to-trainable", func(t *testing.T) {
			dir := t.TempDir()
			want := frozenSave(t, saved, dir, deepgo.SaveOptions{})
			thawed := into
			thawed.freeze = ""
			_, _, _, err := frozenLoad(t, thawed, dir, deepgo.LoadOptions{})
			require.ErrorContains(t, err, `parameter "fc1.weight" is trainable but was frozen when saved`)
			_, got, _, err := frozenLoad(t, thawed, dir, deepgo.LoadOptions{ModuleOnly: true})
			require.NoError(t, err)
			require.NoError(t, bitEqual(want, got))
		})
	}
}

// TestFrozenSaveModel: SaveModel writes the frozen parameters with the
// others; ExcludeFrozen leaves them out.
func TestFrozenSaveModel(t *testing.T) {
	frozen := regexp.MustCompile(freezeMixed)
	for _, exclude := range []bool{false, true} {
		dir := t.TempDir()
		r := run{stage: 3, world: 2, gas: 1, precision: "bf16", freeze: freezeMixed, steps: 2,
			zeroExtra: `, "stage3_gather_16bit_weights_on_model_save": true`}
		r.after = func(ctx context.Context, _ int, e *deepgo.Engine) error {
			return e.SaveModel(ctx, dir, deepgo.SaveModelOptions{ExcludeFrozen: exclude})
		}
		res, err := train(t, r)
		require.NoError(t, err)
		got := readSavedModel(t, filepath.Join(dir, deepgo.DefaultModelFile))
		for name, v := range res.params {
			b, ok := got.bits[name]
			if exclude && frozen.MatchString(name) {
				require.False(t, ok, "%s saved with ExcludeFrozen", name)
				continue
			}
			require.True(t, ok, "%s missing", name)
			require.Equal(t, castBits(v, tensor.BFloat16), b, "%s", name)
		}
	}
}
