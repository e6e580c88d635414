package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
)

// The update rules optimizer types map to (OptimizerSpec.Kind).
const (
	// OptimizerAdam is Adam and AdamW (OptimizerHyper.AdamWMode picks
	// decoupled weight decay).
	OptimizerAdam = "adam"
	// OptimizerLamb is DeepSpeed's FusedLamb.
	OptimizerLamb = "lamb"
	// OptimizerLion is DeepSpeed's FusedLion.
	OptimizerLion = "lion"
	// OptimizerSGD is torch.optim.SGD.
	OptimizerSGD = "sgd"
)

// OptimizerHyper holds an optimizer's hyperparameters. Each update rule
// reads its own fields; LR is the configured base rate.
type OptimizerHyper struct {
	LR             float64
	Beta1, Beta2   float64 // Adam, Lamb, Lion
	Eps            float64 // Adam, Lamb
	WeightDecay    float64
	AdamWMode      bool    // Adam: decoupled weight decay (DeepSpeed's adam_w_mode)
	BiasCorrection bool    // Adam, Lamb
	Momentum       float64 // SGD
	Dampening      float64 // SGD
	Nesterov       bool    // SGD
	MaxCoeff       float64 // Lamb: upper clamp of the trust ratio
	MinCoeff       float64 // Lamb: lower clamp of the trust ratio
}

// OptimizerSpec is a parsed "optimizer" block.
type OptimizerSpec struct {
	// Kind is the update rule: OptimizerAdam, OptimizerLamb, OptimizerLion
	// or OptimizerSGD.
	Kind string
	// Hyper holds the params, with DeepSpeed's defaults for those left out.
	Hyper OptimizerHyper
}

// optPrefix is the ds_config path of the optimizer parameters.
const optPrefix = "optimizer.params."

// ParseOptimizer reads a ds_config "optimizer" block the way DeepSpeed's
// engine does (engine._configure_basic_optimizer): typ is its "type" and
// params its "params". DeepSpeed's own names match in any case (Adam,
// AdamW, Lamb, Lion); any other name is a torch.optim class, matched
// exactly, of which deepgo implements SGD. The other types DeepSpeed knows
// (OneBitAdam, Adagrad, RMSprop, ...) give an error matching
// ErrUnsupportedOptimizer.
//
// Missing params take DeepSpeed's defaults (torch's for SGD). Unknown keys
// (DeepSpeed passes them on as keyword arguments, which raises),
// max_grad_norm, out-of-range values and "auto" (which the Hugging Face
// Trainer resolves before DeepSpeed sees it) are each a *ParamError
// matching ErrInvalidOptimizerParam, joined (errors.Join; errors.As finds
// the first). Parse runs the same checks and reports the
// same paths.
func ParseOptimizer(typ string, params map[string]any) (OptimizerSpec, error) {
	spec, _, err := parseOptimizer(typ, params, false)
	return spec, err
}

// parseOptimizer is ParseOptimizer; loose reads "auto" as the default (see
// paramReader) and returns the reader's bookkeeping.
func parseOptimizer(typ string, params map[string]any, loose bool) (OptimizerSpec, *paramReader, error) {
	rule, err := optimizerRuleFor(typ)
	if err != nil {
		return OptimizerSpec{}, nil, err
	}
	r := newParamReader(optPrefix, rule.kind, params, ErrInvalidOptimizerParam, loose)
	h := rule.def
	// every bad key is reported, not only the first: a key that does not
	// read keeps its default, which the range checks pass, and the checks
	// between two keys skip it (as they skip "auto")
	var errs []error
	skip := maps.Clone(r.autos)
	for _, k := range sortedKeys(params) {
		if err := rule.set(r, &h, k); err != nil {
			errs, skip[k] = append(errs, err), true
		}
	}
	if rule.forceAdamW {
		h.AdamWMode = true
	}
	errs = append(errs, validateHyper(rule.kind, h, optPrefix, skip))
	if err := errors.Join(errs...); err != nil {
		return OptimizerSpec{}, r, err
	}
	return OptimizerSpec{Kind: rule.kind, Hyper: h}, r, nil
}

// ValidateOptimizerHyper checks h for the update rule kind with the ranges
// ParseOptimizer applies; keys in errors are prefix followed by the
// ds_config name (e.g. prefix "ParamGroup.Hyper." gives
// "ParamGroup.Hyper.betas[1]").
func ValidateOptimizerHyper(kind string, h OptimizerHyper, prefix string) error {
	return validateHyper(kind, h, prefix, nil)
}

// optimizerRule is what an optimizer type means: its update rule, its
// defaults and the params it takes.
type optimizerRule struct {
	kind       string
	def        OptimizerHyper
	keys       []string
	forceAdamW bool // "AdamW": decoupled whatever adam_w_mode says
}

// Adam and AdamW: DeepSpeed's FusedAdam / DeepSpeedCPUAdam. DeepSpeed's
// default adam_w_mode is true, so type "Adam" is AdamW unless told
// otherwise; type "AdamW" is always decoupled.
func adamRule(forceW bool) optimizerRule {
	return optimizerRule{
		kind: OptimizerAdam,
		def: OptimizerHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
			AdamWMode: true, BiasCorrection: true},
		keys: []string{"lr", "betas", "eps", "weight_decay", "adam_w_mode", "bias_correction",
			"amsgrad", "torch_adam", "fp32_optimizer_states", "set_grad_none"},
		forceAdamW: forceW,
	}
}

// Lamb: DeepSpeed's FusedLamb; trust ratio clamped to [0.01, 10].
var lambRule = optimizerRule{
	kind: OptimizerLamb,
	def: OptimizerHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, BiasCorrection: true,
		MaxCoeff: 10, MinCoeff: 0.01},
	keys: []string{"lr", "betas", "eps", "weight_decay", "bias_correction", "max_coeff", "min_coeff",
		"eps_inside_sqrt", "amsgrad"},
}

// Lion: DeepSpeed's FusedLion / DeepSpeedCPULion.
var lionRule = optimizerRule{
	kind: OptimizerLion,
	def:  OptimizerHyper{LR: 1e-4, Beta1: 0.9, Beta2: 0.99},
	keys: []string{"lr", "betas", "weight_decay", "fp32_optimizer_states", "set_grad_none"},
}

// SGD: torch.optim.SGD, which DeepSpeed falls back to.
var sgdRule = optimizerRule{
	kind: OptimizerSGD,
	def:  OptimizerHyper{LR: 1e-3},
	keys: []string{"lr", "momentum", "dampening", "weight_decay", "nesterov"},
}

// unsupportedOptimizers are the names DeepSpeed accepts that deepgo does
// not implement (DeepSpeed's own, lower-cased), with why.
var unsupportedOptimizers = map[string]string{
	"onebitadam":  "1-bit Adam needs compressed communication",
	"zerooneadam": "0/1 Adam needs compressed communication",
	"onebitlamb":  "1-bit Lamb needs compressed communication",
	"adagrad":     "Adagrad has no fused kernel yet",
	"muadam":      "muP optimizers are not implemented",
	"muadamw":     "muP optimizers are not implemented",
	"musgd":       "muP optimizers are not implemented",
	"muon":        "Muon is not implemented",
}

// dsClasses are the classes DeepSpeed builds for its optimizer types. They
// are not type names (DeepSpeed looks them up in torch.optim and fails),
// so the error says which type to write.
var dsClasses = map[string]string{
	"fusedadam": "Adam", "cpuadam": "Adam", "deepspeedcpuadam": "Adam",
	"fusedlamb": "Lamb", "fusedlion": "Lion", "cpulion": "Lion", "deepspeedcpulion": "Lion",
}

const supportedOptimizers = "Adam, AdamW, Lamb, Lion (DeepSpeed's names, any case), SGD (torch.optim.SGD)"

func optimizerRuleFor(typ string) (optimizerRule, error) {
	k := strings.ToLower(typ)
	switch {
	case k == "adam":
		return adamRule(false), nil
	case k == "adamw":
		return adamRule(true), nil
	case k == "lamb":
		return lambRule, nil
	case k == "lion":
		return lionRule, nil
	case typ == "SGD": // torch.optim lookup: case-sensitive
		return sgdRule, nil
	}
	why := "unknown type"
	switch {
	case unsupportedOptimizers[k] != "":
		why = unsupportedOptimizers[k]
	case contains(torchOptimizers, typ):
		why = "torch.optim." + typ + " is not implemented"
	case dsClasses[k] != "":
		why = fmt.Sprintf("%s is a class DeepSpeed builds, not a type name; write %q", typ, dsClasses[k])
	default:
		names := append([]string{"Adam", "AdamW", "Lamb", "Lion", "SGD"}, torchOptimizers...)
		if sug := suggest(typ, names); sug != "" {
			why += fmt.Sprintf("; did you mean %q?", sug)
		}
	}
	return optimizerRule{}, &ParamError{Key: "optimizer.type", Value: typ,
		Reason:  fmt.Sprintf("not supported: %s (supported: %s)", why, supportedOptimizers),
		Allowed: "a DeepSpeed optimizer deepgo implements: " + supportedOptimizers,
		Class:   ErrUnsupportedOptimizer, msg: why}
}

// set reads params[k] into h.
func (rule optimizerRule) set(r *paramReader, h *OptimizerHyper, k string) error {
	v := r.params[k]
	if v == nil { // JSON null is Python None: the default
		return nil
	}
	if k == "max_grad_norm" {
		e := r.bad(k, v, `not an optimizer parameter; use the top-level "gradient_clipping"`,
			`no max_grad_norm in optimizer params; use the top-level "gradient_clipping"`)
		e.msg = "DeepSpeed raises ValueError for it"
		return e
	}
	if !contains(rule.keys, k) {
		return r.unknownKey(k, rule.keys)
	}
	if isAuto(v) {
		if r.loose {
			r.autos[k] = true
			return nil
		}
		return r.bad(k, v, `"auto" must be resolved before the optimizer is built`, "a concrete value")
	}
	var err error
	switch k {
	case "lr":
		h.LR, err = r.number(k, 0)
	case "betas":
		h.Beta1, h.Beta2, err = r.betas(k)
	case "eps":
		h.Eps, err = r.number(k, 0)
	case "weight_decay":
		h.WeightDecay, err = r.number(k, 0)
	case "adam_w_mode":
		h.AdamWMode, err = r.boolean(k, false)
	case "bias_correction":
		h.BiasCorrection, err = r.boolean(k, false)
	case "momentum":
		h.Momentum, err = r.number(k, 0)
	case "dampening":
		h.Dampening, err = r.number(k, 0)
	case "nesterov":
		h.Nesterov, err = r.boolean(k, false)
	case "max_coeff":
		h.MaxCoeff, err = r.number(k, 0)
	case "min_coeff":
		h.MinCoeff, err = r.number(k, 0)
	default:
		err = r.acceptedOnly(k)
	}
	return err
}

// acceptedOnly handles keys DeepSpeed takes that change nothing here, or
// that deepgo supports only at one value.
func (r *paramReader) acceptedOnly(k string) error {
	b, err := r.boolean(k, false)
	if err != nil {
		return err
	}
	switch {
	case k == "fp32_optimizer_states" && !b:
		return r.bad(k, b, "only float32 optimizer states are supported", "true (only float32 optimizer states are supported)")
	case (k == "amsgrad" || k == "eps_inside_sqrt") && b:
		return r.bad(k, b, "not supported (FusedAdam/FusedLamb reject it too): must be false", "false (FusedAdam/FusedLamb reject true too)")
	}
	return nil // torch_adam, set_grad_none: implementation choices; the math is the same
}

// betas reads [beta1, beta2].
func (r *paramReader) betas(k string) (float64, float64, error) {
	v := r.params[k]
	var a []any
	switch x := v.(type) {
	case []any:
		a = x
	case []float64:
		for _, f := range x {
			a = append(a, f)
		}
	}
	if len(a) != 2 {
		return 0, 0, r.bad(k, v, "must be a list of two numbers [beta1, beta2]", "an array of two numbers in [0, 1): [beta1, beta2]")
	}
	var b [2]float64
	for i, e := range a {
		f, ok := toFloat(e)
		if !ok {
			return 0, 0, r.must(fmt.Sprintf("%s[%d]", k, i), e, "a number")
		}
		b[i] = f
	}
	return b[0], b[1], nil
}

// validateHyper checks the ranges of h for kind and returns every problem
// (errors.Join of *ParamErrors). auto lists keys read as "auto" (or that
// did not read): a rule between two keys that needs their value is
// skipped, as it is when either key fails its own range (the error is
// that key's, not the other's).
func validateHyper(kind string, h OptimizerHyper, prefix string, auto map[string]bool) error {
	skip := maps.Clone(auto)
	if skip == nil {
		skip = map[string]bool{}
	}
	bad := func(k string, v any, reason, allowed string) error {
		skip[k] = true
		return &ParamError{Key: prefix + k, Value: v, Reason: reason, Allowed: allowed, Class: ErrInvalidOptimizerParam}
	}
	nonNeg := func(k string, v float64) error {
		if !(v >= 0) || math.IsInf(v, 0) {
			return bad(k, v, "must be finite and >= 0", "a number >= 0 (finite)")
		}
		return nil
	}
	in01 := func(k string, v float64) error {
		if !(v >= 0 && v < 1) {
			return bad(k, v, "must be in [0, 1)", "a number in [0, 1)")
		}
		return nil
	}
	errs := []error{nonNeg("lr", h.LR), nonNeg("weight_decay", h.WeightDecay)}
	switch kind {
	case OptimizerSGD:
		errs = append(errs, nonNeg("momentum", h.Momentum))
		if !(h.Dampening >= 0 && h.Dampening <= 1) {
			errs = append(errs, bad("dampening", h.Dampening, "must be in [0, 1]", "a number in [0, 1]"))
		}
		if h.Nesterov && (h.Momentum <= 0 || h.Dampening != 0) && !skip["momentum"] && !skip["dampening"] {
			errs = append(errs, bad("nesterov", h.Nesterov, "needs momentum > 0 and dampening 0 (as torch.optim.SGD)",
				"false unless momentum > 0 and dampening is 0 (as torch.optim.SGD)"))
		}
		return errors.Join(errs...)
	}
	errs = append(errs, in01("betas[0]", h.Beta1), in01("betas[1]", h.Beta2))
	if kind == OptimizerLion {
		return errors.Join(errs...)
	}
	errs = append(errs, nonNeg("eps", h.Eps))
	if kind == OptimizerLamb {
		errs = append(errs, nonNeg("min_coeff", h.MinCoeff), nonNeg("max_coeff", h.MaxCoeff))
		if h.MinCoeff > h.MaxCoeff && !skip["min_coeff"] && !skip["max_coeff"] {
			errs = append(errs, bad("min_coeff", h.MinCoeff, "must be <= max_coeff", "a number <= max_coeff"))
		}
	}
	return errors.Join(errs...)
}
