package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFillTrainerAutos(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
		"gradient_accumulation_steps": "auto",
		"optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
		"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
			"warmup_num_steps": "auto", "total_num_steps": "auto"}}}`))
	require.NoError(t, err)
	notes := fillTrainerAutos(cfg, trainerArgs{microBatch: 4, lr: 3e-4, steps: 50})
	if assert.NotNil(t, cfg.TrainMicroBatchSizePerGPU, "micro batch") {
		assert.Equal(t, 4, *cfg.TrainMicroBatchSizePerGPU, "micro batch")
	}
	assert.Equal(t, 3e-4, cfg.Optimizer.Params["lr"], "optimizer lr")
	assert.Equal(t, 50, cfg.Scheduler.Params["total_num_steps"], "total_num_steps")
	if b, err := cfg.Resolve(2, 1, 1, 1); assert.NoError(t, err, "Resolve") {
		assert.Equal(t, 8, b.TrainBatchSize, "Resolve: global batch")
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{"train_micro_batch_size_per_gpu", "optimizer.params.lr", "scheduler.params.warmup_max_lr"} {
		assert.Contains(t, joined, want, "notes do not name it")
	}
	// a config with no optimizer gets AdamW at the trainer's rate, and says so
	cfg, _ = config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2}`))
	notes = fillTrainerAutos(cfg, trainerArgs{microBatch: 8, lr: 1e-3})
	if assert.NotNil(t, cfg.Optimizer) {
		assert.Equal(t, "AdamW", cfg.Optimizer.Type, "optimizer type")
	}
	if assert.Len(t, notes, 1) {
		assert.True(t, strings.HasPrefix(notes[0], "optimizer:"), "notes %q", notes)
	}
}

func TestImpliedRanks(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		json string
		want int
	}{
		{`{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}`, 4},
		{`{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 32}`, 1},
		{`{"train_micro_batch_size_per_gpu": 4}`, 2},
		{`{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4}`, 2},
	} {
		p := filepath.Join(dir, "c.json")
		require.NoError(t, os.WriteFile(p, []byte(c.json), 0o644))
		assert.Equal(t, c.want, impliedRanks(p), "%s: ranks", c.json)

	}
}
