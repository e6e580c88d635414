package nn_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A checkpoint of a TP run with frozen parameters (tpFreezes[0]: the tied
// wte, column- and row-parallel weights, replicated LayerNorm parameters)
// keeps their values, TP shards as the trainable ones' are: loaded at the
// saving layout the resumed run is bit-identical, at TP 1 and TP 4 it
// follows to the reshard test's tolerances, and the frozen parameters
// keep the saved values bit for bit (the loading engines start from other
// initial values). The manifest reads every parameter, frozen ones
// included, whole and equal to the run's unsharded values, and
// Consolidate writes them. An engine that trains a parameter saved frozen
// refuses the checkpoint with ErrSavedFrozen unless SkipOptimizerStates.
func TestGPTTensorParallelFrozenCheckpoint(t *testing.T) {
	const n, m = 2, 2
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	freeze := tpFreezes[0]
	re := regexp.MustCompile(freeze)
	saved := tpRun{tp: 2, dp: 2, stage: 2, freeze: freeze}
	dir := t.TempDir()
	all, refParams, err := tpSegment{r: saved, save: dir, steps: n + m, saveAt: n}.run(t, corpus)
	require.NoError(t, err)
	refLoss, want := all[n:], flatParams(refParams)
	for _, r := range []tpRun{saved, {tp: 1, dp: 1, freeze: freeze}, {tp: 4, dp: 1, stage: 1, freeze: freeze}, {tp: 2, dp: 1, freeze: freeze}} {
		t.Run(fmt.Sprintf("load-%v", r), func(t *testing.T) {
			loss, params, err := tpSegment{r: r, from: dir, first: n, steps: m}.run(t, corpus)
			require.NoError(t, err)
			requireResumedLike(t, fmt.Sprintf("%v → %v", saved, r), r == saved, refLoss, loss, want, params)
			for name, v := range refParams {
				if re.MatchString(name) {
					require.Equal(t, v, params[name], "frozen %s", name)
				}
			}
		})
	}
	t.Run("thawed", func(t *testing.T) {
		_, _, err := tpSegment{r: tpRun{tp: 2, dp: 1, stage: 1}, from: dir, first: n, steps: 1}.run(t, corpus)
		require.True(t, errors.Is(err, deepgo.ErrSavedFrozen), "%v", err)
		_, _, err = tpSegment{r: tpRun{tp: 2, dp: 1, stage: 1}, from: dir, load: deepgo.LoadOptions{SkipOptimizerStates: true}, first: n, steps: 1}.run(t, corpus)
		require.NoError(t, err)
	})
	t.Run("consolidate", func(t *testing.T) {
		dir := t.TempDir()
		_, params, err := tpSegment{r: saved, save: dir, steps: 2, saveAt: 2}.run(t, corpus)
		require.NoError(t, err)
		ck, err := checkpoint.Open(nil, dir, "")
		require.NoError(t, err)
		defer ck.Close()
		require.Len(t, ck.Manifest.Params, len(params))
		frozen := 0
		for _, p := range ck.Manifest.Params {
			full, err := ck.ReadParam(context.Background(), p)
			require.NoError(t, err)
			v, _ := full.Float32s()
			assert.True(t, slices.Equal(params[p.Name], v), "%s differs from the run's unsharded value", p.Name)
			full.Free()
			if re.MatchString(p.Name) {
				frozen++
			}
		}
		assert.Equal(t, 5, frozen) // wte, two attention/MLP weights, ln_1.bias, ln_f.weight
		require.NoError(t, ck.Consolidate(context.Background(), nil, filepath.Join(t.TempDir(), "model.safetensors")))
	})
}
