package config

import (
	"strings"
)

// deepSpeedOptimizers are DeepSpeed's own optimizer names (matched case-insensitively).
var deepSpeedOptimizers = []string{"adam", "adamw", "lamb", "onebitadam", "zerooneadam", "onebitlamb",
	"lion", "adagrad", "muadam", "muadamw", "musgd", "muon"}

// torchOptimizers are torch.optim classes DeepSpeed falls back to (case-sensitive).
var torchOptimizers = []string{"SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "Adamax", "ASGD", "LBFGS",
	"NAdam", "RAdam", "RMSprop", "Rprop", "SparseAdam", "Adafactor"}

// deepSpeedSchedulers are the schedules in deepspeed/runtime/lr_schedules.py.
var deepSpeedSchedulers = []string{"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"}

// torchSchedulers are torch.optim.lr_scheduler classes DeepSpeed falls back to.
var torchSchedulers = []string{"LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR",
	"LinearLR", "ExponentialLR", "SequentialLR", "CosineAnnealingLR", "ChainedScheduler",
	"ReduceLROnPlateau", "CyclicLR", "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR"}

// IsDeepSpeed reports whether Type names one of DeepSpeed's own optimizers
// (case-insensitive); otherwise it names a torch.optim class.
func (o *Optimizer) IsDeepSpeed() bool { return contains(deepSpeedOptimizers, strings.ToLower(o.Type)) }

// Name returns the canonical optimizer name: DeepSpeed's lower-case name
// ("adam", "onebitadam", ...) or the torch.optim class name as written.
func (o *Optimizer) Name() string {
	if o.IsDeepSpeed() {
		return strings.ToLower(o.Type)
	}
	return o.Type
}

// Float returns the numeric parameter name, if present.
func (o *Optimizer) Float(name string) (float64, bool) { return paramFloat(o.Params, name) }

// LR returns params.lr, if present.
func (o *Optimizer) LR() (float64, bool) { return o.Float("lr") }

// Eps returns params.eps, or 1e-8 (the DeepSpeed Adam default).
func (o *Optimizer) Eps() float64 {
	if v, ok := o.Float("eps"); ok {
		return v
	}
	return 1e-8
}

// WeightDecay returns params.weight_decay, or 0.
func (o *Optimizer) WeightDecay() float64 {
	v, _ := o.Float("weight_decay")
	return v
}

// Betas returns params.betas, or (0.9, 0.999).
func (o *Optimizer) Betas() (float64, float64) {
	if a, ok := o.Params["betas"].([]any); ok && len(a) == 2 {
		b1, ok1 := a[0].(float64)
		b2, ok2 := a[1].(float64)
		if ok1 && ok2 {
			return b1, b2
		}
	}
	return 0.9, 0.999
}

// Bool returns the boolean parameter name, or def when absent.
func (o *Optimizer) Bool(name string, def bool) bool {
	if b, ok := o.Params[name].(bool); ok {
		return b
	}
	return def
}

// AdamWMode reports whether Adam runs in decoupled-weight-decay mode
// (params.adam_w_mode, default true in DeepSpeed; always true for AdamW).
func (o *Optimizer) AdamWMode() bool { return o.Name() == "adamw" || o.Bool("adam_w_mode", true) }

// Float returns the numeric parameter name, if present.
func (s *Scheduler) Float(name string) (float64, bool) { return paramFloat(s.Params, name) }

// Int returns the integer parameter name, if present.
func (s *Scheduler) Int(name string) (int, bool) {
	v, ok := paramFloat(s.Params, name)
	return int(v), ok
}

// String returns the string parameter name, if present.
func (s *Scheduler) String(name string) (string, bool) {
	v, ok := s.Params[name].(string)
	return v, ok
}

func paramFloat(p map[string]any, name string) (float64, bool) {
	switch x := p[name].(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	}
	return 0, false
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// optimizerParams validates optimizer and scheduler blocks in the cleaned
// tree and resolves "auto" parameters the way HF Trainer would where deepgo
// knows the value. Unresolved ones stay "auto" in Params (and are listed in
// Config.Unresolved), so the typed accessors report them as absent.
func (l *loader) optimizerParams(tree map[string]any) {
	var lr any
	if o, ok := tree["optimizer"].(map[string]any); ok {
		typ, _ := o["type"].(string)
		if typ != "" && !contains(deepSpeedOptimizers, strings.ToLower(typ)) && !contains(torchOptimizers, typ) {
			l.fail("optimizer.type", typ, "a DeepSpeed optimizer ("+strings.Join(deepSpeedOptimizers, ", ")+
				", any case) or a torch.optim class ("+strings.Join(torchOptimizers, ", ")+")", "")
		}
		p, _ := o["params"].(map[string]any)
		for _, k := range sortedKeys(p) {
			path := "optimizer.params." + k
			v := p[k]
			if v == "auto" {
				l.autos = append(l.autos, path)
				switch k {
				case "betas":
					p[k] = []any{0.9, 0.999}
				case "eps":
					p[k] = 1e-8
				case "weight_decay":
					p[k] = 0.0
				default:
					l.unresolvedAt(path, `"auto" cannot be resolved: deepgo does not know the training arguments HF Trainer would use; set a value`)
					continue
				}
				l.warn(path, `"auto" resolved to %s (HF TrainingArguments default)`, render(p[k]))
				continue
			}
			switch k {
			case "lr", "weight_decay", "momentum":
				if x, ok := asFloat(v); !ok || x < 0 {
					l.fail(path, v, "a number >= 0", "")
				}
			case "eps":
				if x, ok := asFloat(v); !ok || x <= 0 {
					l.fail(path, v, "a number > 0", "")
				}
			case "betas":
				if !validBetas(v) {
					l.fail(path, v, "an array of two numbers in [0, 1)", "")
				}
			}
		}
		lr = p["lr"]
	}
	if s, ok := tree["scheduler"].(map[string]any); ok {
		typ, _ := s["type"].(string)
		if typ != "" && !contains(deepSpeedSchedulers, typ) && !contains(torchSchedulers, typ) {
			allowed := "a DeepSpeed schedule (" + strings.Join(deepSpeedSchedulers, ", ") + ") or a torch.optim.lr_scheduler class"
			msg := ""
			if sug := suggest(typ, append(append([]string{}, deepSpeedSchedulers...), torchSchedulers...)); sug != "" {
				msg = "did you mean " + sug + "?"
			}
			l.fail("scheduler.type", typ, allowed, msg)
		}
		p, _ := s["params"].(map[string]any)
		for _, k := range sortedKeys(p) {
			path := "scheduler.params." + k
			v := p[k]
			if v == "auto" {
				l.autos = append(l.autos, path)
				switch {
				case k == "warmup_min_lr":
					p[k] = 0.0
					l.warn(path, `"auto" resolved to 0 (as HF Trainer does)`)
				case k == "warmup_max_lr" && isNumber(lr):
					p[k] = lr
					l.warn(path, `"auto" resolved to optimizer.params.lr = %s`, render(lr))
				default:
					l.unresolvedAt(path, `"auto" cannot be resolved: it depends on the dataset length and training arguments; set a value`)
				}
				continue
			}
			switch k {
			case "warmup_min_lr", "warmup_max_lr", "cycle_min_lr", "cycle_max_lr", "lr_range_test_min_lr":
				if x, ok := asFloat(v); !ok {
					l.fail(path, v, "a number", "")
				} else if x < 0 {
					l.warn(path, "negative learning rate %s; DeepSpeed accepts it and so does deepgo, but the schedule will produce negative rates unless the trainer overrides it", render(v))
				}
			case "warmup_num_steps", "cycle_first_step_size", "lr_range_test_step_size":
				if x, ok := asInt(v); !ok || x < 0 {
					l.fail(path, v, "an integer >= 0", "")
				}
			case "total_num_steps", "last_batch_iteration":
				if _, ok := asInt(v); !ok {
					l.fail(path, v, "an integer", "")
				}
			case "warmup_type":
				if v != "log" && v != "linear" {
					l.fail(path, v, `one of "log", "linear"`, "")
				}
			case "warmup_min_ratio", "cos_min_ratio":
				if x, ok := asFloat(v); !ok || x < 0 || x > 1 {
					l.fail(path, v, "a number in [0, 1]", "")
				}
			}
		}
		if typ == "WarmupDecayLR" || typ == "WarmupCosineLR" {
			if _, ok := p["total_num_steps"]; !ok && !contains(l.unresolved, "scheduler.params.total_num_steps") {
				l.fail("scheduler.params.total_num_steps", absent{}, "an integer (required by "+typ+")", "")
			}
		}
	}
}

func isNumber(v any) bool { _, ok := asFloat(v); return ok }

func validBetas(v any) bool {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return false
	}
	for _, e := range a {
		x, ok := asFloat(e)
		if !ok || x < 0 || x >= 1 {
			return false
		}
	}
	return true
}
