package nn_test

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/require"
)

// TestGPTPipelineFrozenCheckpointAcrossEngines: a pipeline checkpoint with
// frozen parameters (the tied wte among them) loads into the
// data-parallel Engine, initialised from other values, with every
// parameter, frozen ones included, bit-identical to the pipeline's (and
// the manifest reads them so, Consolidate exporting them); saved
// with ExcludeFrozen it leaves them out, and a pipeline engine loading it
// (without NonStrict) keeps its own frozen values and takes the
// checkpoint's trainable ones.
func TestGPTPipelineFrozenCheckpointAcrossEngines(t *testing.T) {
	mk, err := data.NewMarkov(32, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: mk.Generate(20000, 4), Vocab: 32}
	freeze := pipeFreezes[0]
	re := regexp.MustCompile(freeze)
	r := pipeRun{2, 1, 4, "1F1B", 1, 0}
	dir := t.TempDir()
	_, saved, _, err := pipeFrozenCurve(r, freeze, pipeSeed, 2, corpus, "", dir, deepgo.SaveOptions{})
	require.NoError(t, err)
	var loaded map[string][]float32
	err = local.Run(context.Background(), 1, local.Options{Timeout: 60 * time.Second, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 16, "zero_optimization": {"stage": 1},
			"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}`))
		if err != nil {
			return err
		}
		g, err := nn.NewReadyGPT(pipeGPT(corpus.Vocab), nil, pipeSeed+1)
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
		if _, err := tr.Load(ctx, dir, deepgo.LoadOptions{}); err != nil {
			return err
		}
		loaded, err = tr.Parameters(ctx)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, saved, loaded)
	ck, err := checkpoint.Open(nil, dir, "")
	require.NoError(t, err)
	defer ck.Close()
	require.Len(t, ck.Manifest.Params, len(saved))
	for _, p := range ck.Manifest.Params {
		full, err := ck.ReadParam(context.Background(), p)
		require.NoError(t, err)
		v, _ := full.Float32s()
		require.Equal(t, saved[p.Name], v, "%s: the manifest's value", p.Name)
		full.Free()
	}
	require.NoError(t, ck.Consolidate(context.Background(), nil, filepath.Join(t.TempDir(), "model.safetensors")))

	_, other, _ := plainGPTFrozen(t, pipeGPT(corpus.Vocab), pipeSeed+1, 0, 1.0, nil, re)
	excl := t.TempDir()
	_, _, _, err = pipeFrozenCurve(r, freeze, pipeSeed, 2, corpus, "", excl, deepgo.SaveOptions{ExcludeFrozen: true})
	require.NoError(t, err)
	_, got, _, err := pipeFrozenCurve(r, freeze, pipeSeed+1, 0, corpus, excl, "", deepgo.SaveOptions{})
	require.NoError(t, err)
	n := 0
	for name, v := range other {
		if re.MatchString(name) {
			n++
			require.Equal(t, v, got[name], "frozen %s: not the loading engine's own value", name)
		} else {
			require.Equal(t, saved[name], got[name], "trainable %s: not the checkpoint's", name)
		}
	}
	require.Positive(t, n)
}
