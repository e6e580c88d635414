package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/config"
)

func TestFillTrainerAutos(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
		"gradient_accumulation_steps": "auto",
		"optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
		"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
			"warmup_num_steps": "auto", "total_num_steps": "auto"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	notes := fillTrainerAutos(cfg, trainerArgs{microBatch: 4, lr: 3e-4, steps: 50})
	if cfg.TrainMicroBatchSizePerGPU == nil || *cfg.TrainMicroBatchSizePerGPU != 4 {
		t.Errorf("micro batch = %v, want 4", cfg.TrainMicroBatchSizePerGPU)
	}
	if got := cfg.Optimizer.Params["lr"]; got != 3e-4 {
		t.Errorf("optimizer lr = %v, want 3e-4", got)
	}
	if got := cfg.Scheduler.Params["total_num_steps"]; got != 50 {
		t.Errorf("total_num_steps = %v, want 50", got)
	}
	if b, err := cfg.Resolve(2, 1, 1, 1); err != nil || b.TrainBatchSize != 8 {
		t.Errorf("Resolve = %+v, %v; want a global batch of 8", b, err)
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{"train_micro_batch_size_per_gpu", "optimizer.params.lr", "scheduler.params.warmup_max_lr"} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes do not name %s:\n%s", want, joined)
		}
	}
	// a config with no optimizer gets AdamW at the trainer's rate, and says so
	cfg, _ = config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2}`))
	notes = fillTrainerAutos(cfg, trainerArgs{microBatch: 8, lr: 1e-3})
	if cfg.Optimizer == nil || cfg.Optimizer.Type != "AdamW" || len(notes) != 1 || !strings.HasPrefix(notes[0], "optimizer:") {
		t.Errorf("optimizer %+v, notes %q", cfg.Optimizer, notes)
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
		if err := os.WriteFile(p, []byte(c.json), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := impliedRanks(p); got != c.want {
			t.Errorf("%s: %d ranks, want %d", c.json, got, c.want)
		}
	}
}
