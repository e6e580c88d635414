package main

import (
	"fmt"
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
		for _, w := range cfg.Warnings {
			assert.NotEqual(t, want, w.Path, "the config's warning that %s is unresolved outlives its filling: %v", want, w)
		}
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
	for _, c := range []struct {
		json string
		want int
	}{
		{`{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}`, 4},
		{`{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 32}`, 1},
		{`{"train_micro_batch_size_per_gpu": 4}`, 2},
		{`{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4}`, 2},
		{`{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8}`, 8},
		// beyond maxImpliedRanks without an accumulation: the largest
		// divisor up to 8, the accumulation making up the rest
		{`{"train_batch_size": 65536, "train_micro_batch_size_per_gpu": 64}`, 8},
		{`{"train_batch_size": 18, "train_micro_batch_size_per_gpu": 2}`, 3},
		{`{"train_batch_size": 22, "train_micro_batch_size_per_gpu": 2}`, 1},
		// all three given fix the world, large or not
		{`{"train_batch_size": 65536, "train_micro_batch_size_per_gpu": 64, "gradient_accumulation_steps": 64}`, 16},
	} {
		cfg, err := config.Parse([]byte(c.json))
		require.NoError(t, err, c.json)
		got, note := impliedRanks(cfg)
		assert.Equal(t, c.want, got, "%s: ranks", c.json)
		tb, micro := 0, 0
		_, err = fmt.Sscanf(c.json, `{"train_batch_size": %d, "train_micro_batch_size_per_gpu": %d`, &tb, &micro)
		capped := err == nil && !strings.Contains(c.json, "gradient_accumulation") && tb/micro > maxImpliedRanks
		assert.Equal(t, capped, note != "", "%s: note %q", c.json, note)
		if capped {
			assert.Contains(t, note, fmt.Sprintf("gradient_accumulation_steps %d", tb/micro/got), "%s: note", c.json)
		}
	}
}

// TestLRFlag: an --lr given on the command line fills an optimizer lr that
// is absent or null, with a note, and is refused beside a config's own
// different lr, which would otherwise train silently instead of it.
func TestLRFlag(t *testing.T) {
	for _, c := range []struct {
		name, params string
		given        bool
		wantLR       any    // optimizer.params.lr after fillTrainerAutos
		wantNote     string // in the notes; "" none about lr
		wantErr      string // checkLRFlag's
	}{
		{"absent, given", `{}`, true, 0.05, "optimizer.params.lr: absent, and --lr given; deepgo train uses 0.05", ""},
		{"null, given", `{"lr": null}`, true, 0.05, "optimizer.params.lr: null, and --lr given", ""},
		{"auto, given", `{"lr": "auto"}`, true, 0.05, `optimizer.params.lr: "auto"`, ""},
		{"absent, default", `{}`, false, nil, "", ""},
		{"null, default", `{"lr": null}`, false, nil, "", ""},
		{"same value", `{"lr": 0.05}`, true, 0.05, "", ""},
		{"config's own", `{"lr": 0.001}`, true, 0.001, "", "--lr 0.05: c.json sets optimizer.params.lr 0.001; give one"},
		{"config's own, default", `{"lr": 0.001}`, false, 0.001, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": ` + c.params + `}}`))
			require.NoError(t, err)
			a := trainerArgs{microBatch: 2, lr: 0.05, lrGiven: c.given}
			err = checkLRFlag("c.json", cfg, a)
			if c.wantErr != "" {
				assert.ErrorContains(t, err, c.wantErr)
			} else {
				assert.NoError(t, err)
			}
			notes := strings.Join(fillTrainerAutos(cfg, a), "\n")
			assert.Equal(t, c.wantLR, cfg.Optimizer.Params["lr"], "optimizer.params.lr")
			if c.wantNote != "" {
				assert.Contains(t, notes, c.wantNote)
			} else {
				assert.NotContains(t, notes, "params.lr", "notes")
			}
		})
	}
}

// TestLRFlagSchedule: a schedule whose peak rate is its own key
// (warmup_max_lr, cycle_max_lr) gets --lr there when the key is absent or
// null, and a different rate there beside --lr is refused.
func TestLRFlagSchedule(t *testing.T) {
	for _, c := range []struct {
		name, sched string
		wantPeak    any
		wantErr     string
	}{
		{"WarmupDecayLR absent", `{"type": "WarmupDecayLR", "params": {"total_num_steps": 10}}`, 0.05, ""},
		{"WarmupLR null", `{"type": "WarmupLR", "params": {"warmup_max_lr": null}}`, 0.05, ""},
		{"WarmupLR same", `{"type": "WarmupLR", "params": {"warmup_max_lr": 0.05}}`, 0.05, ""},
		{"WarmupLR other", `{"type": "WarmupLR", "params": {"warmup_max_lr": 0.002}}`, 0.002, "sets scheduler.params.warmup_max_lr 0.002, the rate its WarmupLR schedule reaches"},
		{"OneCycle list", `{"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": [0.01]}}`, []any{0.01}, "scheduler.params.cycle_max_lr [0.01]"},
		{"WarmupCosineLR", `{"type": "WarmupCosineLR", "params": {"total_num_steps": 10}}`, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, "scheduler": ` + c.sched + `}`))
			require.NoError(t, err)
			a := trainerArgs{microBatch: 2, lr: 0.05, lrGiven: true, steps: 10}
			err = checkLRFlag("c.json", cfg, a)
			if c.wantErr != "" {
				assert.ErrorContains(t, err, c.wantErr)
			} else {
				assert.NoError(t, err)
			}
			fillTrainerAutos(cfg, a)
			peak := map[string]string{"WarmupDecayLR": "warmup_max_lr", "WarmupLR": "warmup_max_lr", "OneCycle": "cycle_max_lr", "WarmupCosineLR": "warmup_max_lr"}[cfg.Scheduler.Type]
			assert.Equal(t, c.wantPeak, cfg.Scheduler.Params[peak], "scheduler.params.%s", peak)
		})
	}
}

// TestMicroBatchFlag: a --micro-batch given on the command line fills a
// micro-batch left absent or "auto" even beside a train_batch_size (which
// would fix it otherwise; the accumulation steps follow), and is refused
// beside a config's own different micro-batch. Not given, the config's
// train_batch_size fixes it, as in DeepSpeed.
func TestMicroBatchFlag(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		given     bool
		wantMicro int // 0: left to Resolve
		wantGAS   int // resolved over 2 ranks; 0: not checked
		wantErr   string
	}{
		{"nothing, default", `{}`, false, 8, 1, ""},
		{"tbs, auto micro, given", `{"train_batch_size": 16, "train_micro_batch_size_per_gpu": "auto"}`, true, 2, 4, ""},
		{"tbs only, given", `{"train_batch_size": 16}`, true, 2, 4, ""},
		{"tbs only, default", `{"train_batch_size": 16}`, false, 0, 1, ""},
		{"same value", `{"train_micro_batch_size_per_gpu": 2}`, true, 2, 1, ""},
		{"config's own", `{"train_micro_batch_size_per_gpu": 8}`, true, 8, 0, "--micro-batch 2: c.json sets train_micro_batch_size_per_gpu 8; give one"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(c.doc))
			require.NoError(t, err)
			a := trainerArgs{microBatch: 2, microGiven: c.given, lr: 1e-3}
			if !c.given {
				a.microBatch = 8
			}
			err = checkMicroFlag("c.json", cfg, a)
			if c.wantErr != "" {
				assert.ErrorContains(t, err, c.wantErr)
				return
			}
			require.NoError(t, err)
			fillTrainerAutos(cfg, a)
			if c.wantMicro == 0 {
				assert.Nil(t, cfg.TrainMicroBatchSizePerGPU, "micro-batch")
			} else if assert.NotNil(t, cfg.TrainMicroBatchSizePerGPU, "micro-batch") {
				assert.Equal(t, c.wantMicro, *cfg.TrainMicroBatchSizePerGPU, "micro-batch")
			}
			if c.wantGAS > 0 {
				b, err := cfg.Resolve(2, 1, 1, 1)
				if assert.NoError(t, err) {
					assert.Equal(t, c.wantGAS, b.GradAccum, "gradient accumulation over 2 ranks")
				}
			}
		})
	}
}
