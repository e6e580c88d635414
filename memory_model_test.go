package deepgo_test

import (
	"context"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Engine.Memory counts the activations nn.GPT keeps in arenas of its own
// (ModelActivations, its ActivationBytes) where they live, on the CPU and
// on the simulated device: a user pass found them missing from a report
// that said the arena was included.
func TestMemoryCountsModelActivations(t *testing.T) {
	const vocab, seqLen = 32, 16
	src, err := data.NewMarkov(vocab, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(2_000, 4), Vocab: vocab}
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`))
		require.NoError(t, err)
		g, err := nn.NewReadyGPT(nn.GPTConfig{Layers: 2, Heads: 2, Width: 16, Vocab: vocab, SeqLen: seqLen}, nil, 1)
		require.NoError(t, err)
		tr, err := deepgo.Initialize(context.Background(), cfg, g, deepgo.WithDevice(dev))
		require.NoError(t, err, "%v", dev)
		b := corpus.MakeBatch([]int{0, 1}, seqLen)
		_, err = tr.TrainBatch(context.Background(), []model.MicroBatch{b.MicroBatch()})
		require.NoError(t, err, "%v", dev)
		m := tr.(*deepgo.Engine).Memory()
		assert.Positive(t, m.ModelActivations, "%v: the GPT's activations", dev)
		assert.Equal(t, g.ActivationBytes(), m.ModelActivations, "%v", dev)
		live := m.HostBytes
		if !dev.IsCPU() {
			live = m.DeviceBytes
		}
		assert.GreaterOrEqual(t, live, m.ModelStates()+m.ModelActivations, "%v: counted where it lives", dev)
		require.NoError(t, tr.Close())
		g.Free()
	}
}
