package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallShape is the shape of deepgo train --model small on in-process
// ranks of the synthetic corpus.
func smallShape(ranks int, device string) trainShape {
	g := trainModels["small"].gpt
	g.Vocab = trainModels["small"].vocab
	return trainShape{gpt: g, world: ranks, inProc: ranks, tp: 1, pp: 1, sp: 1, device: device, flagMicro: 8}
}

// TestCheckMicroBatchMemory: a micro-batch whose token buffers and
// activations alone exceed the machine's memory is refused up front,
// naming the key (or flag) it comes from, its value, the bytes needed and
// the memory there is; sensible ones and triads that do not resolve pass.
func TestCheckMicroBatchMemory(t *testing.T) {
	const total = 16 << 30
	for _, tc := range []struct {
		name  string
		doc   string
		shape trainShape
		want  []string // in the error; nil: accepted
	}{
		{name: "absurd micro-batch", doc: `{"train_micro_batch_size_per_gpu": 1e8}`, shape: smallShape(2, "cpu"),
			want: []string{"train_micro_batch_size_per_gpu 100000000: a micro-batch of 100000000 sequences x 32 tokens needs at least ",
				"of token buffers and activations on 2 in-process rank(s), more than this machine's 16.0 GiB (17179869184 bytes) of memory; allowed: a micro-batch of at most "}},
		{name: "from train_batch_size", doc: `{"train_batch_size": 1e9, "gradient_accumulation_steps": 5}`, shape: smallShape(2, "cpu"),
			want: []string{"train_batch_size 1000000000 (a micro-batch of 100000000 per rank: 100000000 x 5 accumulation steps x 2 data-parallel ranks)"}},
		{name: "from --micro-batch", doc: `{}`, shape: func() trainShape { s := smallShape(1, "cpu"); s.flagMicro = 1e9; return s }(),
			want: []string{"--micro-batch (the config gives no batch size) 1000000000:"}},
		{name: "on a device, the token buffers", doc: `{"train_micro_batch_size_per_gpu": 1e9}`, shape: smallShape(1, "cuda"),
			want: []string{"of token buffers on 1 in-process rank(s)"}},
		{name: "device: activations are not host memory", doc: `{"train_micro_batch_size_per_gpu": 1e7}`, shape: smallShape(1, "cuda")},
		{name: "sensible", doc: `{"train_micro_batch_size_per_gpu": 64}`, shape: smallShape(8, "cpu")},
		{name: "large but fits", doc: `{"train_micro_batch_size_per_gpu": 100000}`, shape: smallShape(2, "cpu")},
		{name: "triad does not resolve", doc: `{"train_batch_size": 1e9, "train_micro_batch_size_per_gpu": 3}`, shape: smallShape(2, "cpu")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tc.doc))
			require.NoError(t, err)
			err = checkMicroBatchMemory(cfg, tc.shape, total)
			if tc.want == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestTrainRefusesAbsurdMicroBatch: deepgo train refuses such a config
// before any rank starts, rather than crashing out of memory while making
// its first batch.
func TestTrainRefusesAbsurdMicroBatch(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"train_micro_batch_size_per_gpu": 1e12}`), 0o644))
	var out, errb strings.Builder
	_, err := train(p, "", "tiny", 2, 1, trainerArgs{microBatch: 8, lr: 0.01}, &out, &errb)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "train_micro_batch_size_per_gpu 1000000000000: ")
	assert.Contains(t, err.Error(), "of memory; allowed: a micro-batch of at most ")
	assert.NotContains(t, out.String(), "training GPT", "the ranks started")
}

// TestMicroBatchMemorySharedConfigs: no config of the shared collections
// that loads is refused for either model on a machine of 4 GiB, at the
// ranks deepgo train would run it on.
func TestMicroBatchMemorySharedConfigs(t *testing.T) {
	const total = 4 << 30
	checked := 0
	var most float64
	mostName := ""
	for _, dir := range shareddata.ConfigDirs(t) {
		files, err := filepath.Glob(filepath.Join(dir, "*"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, ".md") || strings.HasSuffix(f, ".tsv") {
				continue
			}
			cfg, err := config.Load(f)
			if err != nil {
				continue // does not train today
			}
			pp, virtual := pipeShape(cfg)
			tp, sp := tpSize(cfg), spSize(cfg)
			ranks, _ := impliedRanks(cfg)
			world := ranks * pp * tp * sp
			for name, mc := range trainModels {
				g := mc.gpt
				g.Vocab = mc.vocab
				g.Layers = pipeLayers(g.Layers, pp, virtual)
				s := trainShape{gpt: g, world: world, inProc: world, tp: tp, pp: pp, sp: sp, device: "cpu", flagMicro: 8}
				assert.NoError(t, checkMicroBatchMemory(cfg, s, total), "%s, --model %s", filepath.Base(f), name)
				checked++
				if b, _, ok := microBatchFrom(cfg, s); ok {
					if need := float64(sampleBytes(s, b.GradAccum)) * float64(b.MicroBatch); need > most {
						most, mostName = need, filepath.Base(f)+" --model "+name
					}
				}
			}
		}
	}
	assert.Positive(t, checked)
	t.Logf("%d checks; the largest lower bound: %s, %s", checked, gibBytes(most), mostName)
}
