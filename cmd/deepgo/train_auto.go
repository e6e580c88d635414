package main

import (
	"fmt"
	"sort"

	"github.com/deepgo-ml/deepgo/config"
)

// trainerArgs are the values a trainer owns and a DeepSpeed config may leave
// to it: absent, or "auto" (the Hugging Face Trainer fills those from its
// own arguments; deepgo train is the trainer here).
type trainerArgs struct {
	microBatch int
	lr         float64
	steps      int

	resumeFallback bool           // --resume-fallback: not a config value, carried along
	device         string         // --device
	metricsAddr    string         // --metrics-addr
	nanCheckEvery  int            // --nan-check-every
	job            *procJob       // the launched job this process is one rank of; nil: in-process ranks
	progress       *trainProgress // where rank 0 stands, for the interrupted line; nil: not recorded
}

// fillTrainerAutos fills what the config leaves to the trainer and returns
// one note per value filled, naming the key and the value.
func fillTrainerAutos(cfg *config.Config, a trainerArgs) []string {
	var notes []string
	note := func(path string, v any, why string) {
		notes = append(notes, fmt.Sprintf("%s: %s; deepgo train uses %v", path, why, v))
	}
	if cfg.TrainMicroBatchSizePerGPU == nil && cfg.TrainBatchSize == nil {
		mb := a.microBatch
		cfg.TrainMicroBatchSizePerGPU = &mb
		note("train_micro_batch_size_per_gpu", mb, "absent or \"auto\" (with train_batch_size)")
	}
	if cfg.Optimizer == nil {
		cfg.Optimizer = &config.Optimizer{Type: "AdamW", Params: map[string]any{"lr": a.lr}}
		note("optimizer", fmt.Sprintf("AdamW with lr %g", a.lr), "absent (Megatron-style configs build their own)")
	}
	optAuto := map[string]any{"lr": a.lr, "weight_decay": 0.0, "betas": []any{0.9, 0.999}, "eps": 1e-8}
	fill(cfg.Optimizer.Params, "optimizer.params", optAuto, note)
	if cfg.Scheduler != nil {
		schedAuto := map[string]any{"warmup_min_lr": 0.0, "warmup_max_lr": a.lr, "warmup_num_steps": 0,
			"total_num_steps": a.steps, "cycle_max_lr": a.lr}
		fill(cfg.Scheduler.Params, "scheduler.params", schedAuto, note)
	}
	return notes
}

// fill replaces "auto" values of params that have a trainer default.
func fill(params map[string]any, path string, defaults map[string]any, note func(string, any, string)) {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if s, ok := params[k].(string); ok && s == "auto" {
			if v, ok := defaults[k]; ok {
				params[k] = v
				note(path+"."+k, v, "\"auto\"")
			}
		}
	}
}
