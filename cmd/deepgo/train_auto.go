package main

import (
	"fmt"
	"regexp"
	"slices"
	"sort"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/nn"
)

// trainerArgs are the values a trainer owns and a DeepSpeed config may leave
// to it: absent, or "auto" (the Hugging Face Trainer fills those from its
// own arguments; deepgo train is the trainer here).
type trainerArgs struct {
	microBatch int
	microGiven bool // --micro-batch was on the command line: it also fills a micro-batch a train_batch_size would fix
	lr         float64
	lrGiven    bool // --lr was on the command line: it also fills an lr absent or null
	steps      int

	resumeFallback bool           // --resume-fallback: not a config value, carried along
	loadModuleOnly bool           // --load-module-only: checkpoint.load_path seeds the parameters only
	device         string         // --device
	metricsAddr    string         // --metrics-addr
	nanCheckEvery  int            // --nan-check-every
	evalInterval   int            // --eval-interval: 0, no evaluation
	evalIters      int            // --eval-iters: 0, gradient_accumulation_steps
	saveModel      string         // --save-model: "", no model file
	freeze         *regexp.Regexp // --freeze: nil, nothing frozen
	moe            nn.MoEConfig   // --moe-*: the GPT's MoE layers
	job            *procJob       // the launched job this process is one rank of; nil: in-process ranks
	progress       *trainProgress // where rank 0 stands, for the interrupted line; nil: not recorded
}

// fillTrainerAutos fills what the config leaves to the trainer and returns
// one note per value filled, naming the key and the value.
func fillTrainerAutos(cfg *config.Config, a trainerArgs) []string {
	var notes []string
	note := func(path string, v any, why string) {
		notes = append(notes, fmt.Sprintf("%s: %s; deepgo train uses %v", path, why, v))
		// the config's warning that the key is unresolved no longer holds
		cfg.Warnings = slices.DeleteFunc(cfg.Warnings, func(w config.Warning) bool { return w.Path == path })
	}
	if cfg.TrainMicroBatchSizePerGPU == nil && (cfg.TrainBatchSize == nil || a.microGiven) {
		// given on the command line it also wins over the micro-batch
		// train_batch_size would fix; the accumulation steps follow
		why := "absent or \"auto\", as is train_batch_size"
		if cfg.TrainBatchSize != nil {
			why = "absent or \"auto\", and --micro-batch given"
		}
		mb := a.microBatch
		cfg.TrainMicroBatchSizePerGPU = &mb
		note("train_micro_batch_size_per_gpu", mb, why)
	}
	if cfg.Optimizer == nil {
		cfg.Optimizer = &config.Optimizer{Type: "AdamW", Params: map[string]any{"lr": a.lr}}
		note("optimizer", fmt.Sprintf("AdamW with lr %g", a.lr), "absent (Megatron-style configs build their own)")
	}
	if a.lrGiven {
		fillFromLRFlag(&cfg.Optimizer.Params, "optimizer.params", "lr", a.lr, note)
		if s := cfg.Scheduler; s != nil && schedulePeakKey[s.Type] != "" {
			fillFromLRFlag(&s.Params, "scheduler.params", schedulePeakKey[s.Type], a.lr, note)
		}
	}
	optAuto := map[string]any{"lr": a.lr, "weight_decay": 0.0, "betas": []any{0.9, 0.999}, "eps": 1e-8}
	fill(cfg.Optimizer.Params, "optimizer.params", optAuto, note)
	if cfg.Scheduler != nil {
		schedAuto := map[string]any{"warmup_min_lr": 0.0, "warmup_max_lr": a.lr, "warmup_num_steps": 2,
			"total_num_steps": a.steps, "cycle_max_lr": a.lr}
		fill(cfg.Scheduler.Params, "scheduler.params", schedAuto, note)
	}
	return notes
}

// checkLRFlag refuses an --lr given on the command line that the config
// overrides: its optimizer sets another lr, or its schedule another peak
// rate (warmup_max_lr, cycle_max_lr). DeepSpeed's Hugging Face integration
// refuses such a mismatch between the config and the trainer's arguments
// too; without the check the config's value would train silently where the
// user asked for another.
func checkLRFlag(cfgPath string, cfg *config.Config, a trainerArgs) error {
	if !a.lrGiven {
		return nil
	}
	const how = "give one, or the same value in both (--lr fills an lr that is absent, null or \"auto\", or the optimizer of a config without one)"
	if o := cfg.Optimizer; o != nil {
		if lr, ok := o.LR(); ok && lr != a.lr {
			return fmt.Errorf("--lr %v: %s sets optimizer.params.lr %v; %s", a.lr, cfgPath, lr, how)
		}
	}
	if s := cfg.Scheduler; s != nil {
		if key := schedulePeakKey[s.Type]; key != "" {
			for _, v := range lrValues(s.Params[key]) {
				if v != a.lr {
					return fmt.Errorf("--lr %v: %s sets scheduler.params.%s %v, the rate its %s schedule reaches; %s", a.lr, cfgPath, key, s.Params[key], s.Type, how)
				}
			}
		}
	}
	return nil
}

// checkMicroFlag refuses a --micro-batch given on the command line beside
// a config that sets another train_micro_batch_size_per_gpu, which would
// otherwise train silently instead of it.
func checkMicroFlag(cfgPath string, cfg *config.Config, a trainerArgs) error {
	if m := cfg.TrainMicroBatchSizePerGPU; a.microGiven && m != nil && *m != a.microBatch {
		return fmt.Errorf("--micro-batch %d: %s sets train_micro_batch_size_per_gpu %d; give one, or the same value in both (--micro-batch fills a micro-batch that is absent or \"auto\")", a.microBatch, cfgPath, *m)
	}
	return nil
}

// schedulePeakKey is the key holding the highest rate of each schedule
// whose peak is not the optimizer's lr (WarmupLR's warmup_max_lr defaults
// to it, WarmupDecayLR's to 0.001; OneCycle requires its own).
var schedulePeakKey = map[string]string{
	config.ScheduleWarmupLR:      "warmup_max_lr",
	config.ScheduleWarmupDecayLR: "warmup_max_lr",
	config.ScheduleOneCycle:      "cycle_max_lr",
}

// lrValues are the numbers of a rate given as one number or a list per
// param group; nothing for anything else ("auto", null, absent).
func lrValues(v any) []float64 {
	switch x := v.(type) {
	case float64:
		return []float64{x}
	case int64:
		return []float64{float64(x)}
	case []any:
		var out []float64
		for _, e := range x {
			out = append(out, lrValues(e)...)
		}
		return out
	}
	return nil
}

// fillFromLRFlag sets (*params)[key] to --lr's value v when the key is
// absent or null, and notes it under path.
func fillFromLRFlag(params *map[string]any, path, key string, v any, note func(string, any, string)) {
	old, ok := (*params)[key]
	if ok && old != nil {
		return
	}
	why := "absent"
	if ok {
		why = "null"
	}
	if *params == nil {
		*params = map[string]any{}
	}
	(*params)[key] = v
	note(path+"."+key, v, why+", and --lr given")
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
