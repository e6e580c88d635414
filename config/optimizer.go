package config

import (
	"errors"
	"strings"
)

// deepSpeedOptimizers are DeepSpeed's own optimizer names (matched case-insensitively).
var deepSpeedOptimizers = []string{"adam", "adamw", "lamb", "onebitadam", "zerooneadam", "onebitlamb",
	"lion", "adagrad", "muadam", "muadamw", "musgd", "muon"}

// torchOptimizers are torch.optim classes DeepSpeed falls back to (case-sensitive).
var torchOptimizers = []string{"SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "Adamax", "ASGD", "LBFGS",
	"NAdam", "RAdam", "RMSprop", "Rprop", "SparseAdam", "Adafactor"}

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

// Hyper returns the params as ParseOptimizer reads them, with the type's
// defaults for what is left out; an unresolved "auto" reads as the default.
func (o *Optimizer) Hyper() (OptimizerHyper, error) {
	spec, _, err := parseOptimizer(o.Type, o.Params, true)
	return spec.Hyper, err
}

// hyperOrAdam is Hyper, or DeepSpeed's Adam defaults when the block does
// not parse.
func (o *Optimizer) hyperOrAdam() OptimizerHyper {
	h, err := o.Hyper()
	if err != nil {
		return adamRule(false).def
	}
	return h
}

// Eps returns eps as Hyper reads it (1e-8 for Adam and Lamb by default).
func (o *Optimizer) Eps() float64 { return o.hyperOrAdam().Eps }

// WeightDecay returns weight_decay as Hyper reads it (0 by default).
func (o *Optimizer) WeightDecay() float64 { return o.hyperOrAdam().WeightDecay }

// Betas returns betas as Hyper reads it ((0.9, 0.999) for Adam and Lamb,
// (0.9, 0.99) for Lion by default).
func (o *Optimizer) Betas() (float64, float64) {
	h := o.hyperOrAdam()
	return h.Beta1, h.Beta2
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
func (o *Optimizer) AdamWMode() bool { return o.hyperOrAdam().AdamWMode }

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

// optimizerParams resolves "auto" in the optimizer and scheduler params the
// way the HF Trainer would where deepgo knows the value, then checks both
// blocks with ParseOptimizer's and ParseScheduler's rules, so Parse and
// optim.New / optim.NewSchedule (deepgo.Initialize) agree. Unresolved
// "auto" values stay in Params (and in Config.Unresolved), so the typed
// accessors report them as absent, and the checks read them as the default.
func (l *loader) optimizerParams(tree map[string]any) {
	var lr any
	baseLR, hasBetas := 1e-3, true // a client optimizer's: unknown here; only the group count matters
	if o, ok := tree["optimizer"].(map[string]any); ok {
		p, _ := o["params"].(map[string]any)
		l.optimizerAutos(p)
		lr = p["lr"]
		if typ, ok := o["type"].(string); ok {
			spec, _, err := parseOptimizer(typ, p, true)
			l.paramError(err)
			if err == nil {
				baseLR, hasBetas = spec.Hyper.LR, spec.Kind != OptimizerSGD
			}
		}
	}
	if s, ok := tree["scheduler"].(map[string]any); ok {
		p, _ := s["params"].(map[string]any)
		l.schedulerAutos(p, lr)
		if typ, ok := s["type"].(string); ok {
			spec, err := parseScheduler(typ, p, []float64{baseLR}, hasBetas, true)
			l.paramError(err)
			if err == nil {
				l.warns = append(l.warns, spec.Warnings...)
			}
		}
	}
}

// paramError records a ParseOptimizer / ParseScheduler error, each of a
// joined list.
func (l *loader) paramError(err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			l.paramError(e)
		}
		return
	}
	var pe *ParamError
	switch {
	case errors.As(err, &pe):
		l.errs = append(l.errs, pe.fieldError())
	case err != nil: // not a document problem (no param group); kept visible all the same
		l.errs = append(l.errs, &FieldError{Path: "scheduler", Msg: err.Error()})
	}
}

// optimizerAutos resolves "auto" optimizer params to HF TrainingArguments'
// defaults where it can and records the others as unresolved.
func (l *loader) optimizerAutos(p map[string]any) {
	for _, k := range sortedKeys(p) {
		if !isAuto(p[k]) {
			continue
		}
		path := optPrefix + k
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
	}
}

// schedulerAutos resolves "auto" scheduler params as the HF Trainer does
// where deepgo knows the value (warmup_min_lr 0, warmup_max_lr the
// optimizer's lr) and records the others as unresolved.
func (l *loader) schedulerAutos(p map[string]any, lr any) {
	for _, k := range sortedKeys(p) {
		if !isAuto(p[k]) {
			continue
		}
		path := schedPrefix + k
		l.autos = append(l.autos, path)
		switch {
		case k == keyWarmupMinLR:
			p[k] = 0.0
			l.warn(path, `"auto" resolved to 0 (as HF Trainer does)`)
		case k == keyWarmupMaxLR && isNumber(lr):
			p[k] = lr
			l.warn(path, `"auto" resolved to optimizer.params.lr = %s`, render(lr))
		default:
			l.unresolvedAt(path, `"auto" cannot be resolved: it depends on the dataset length and training arguments; set a value`)
		}
	}
}

func isNumber(v any) bool { _, ok := asFloat(v); return ok }
