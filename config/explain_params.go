package config

import (
	"fmt"
	"strings"
)

// The optimizer and scheduler params are not schema fields (each type takes
// its own keyword arguments, as DeepSpeed passes them to the class), so
// Explain answers for them from these tables; TestExplainParams checks them
// against ParseOptimizer and ParseScheduler.

// optParamDocs says what each optimizer param does in deepgo.
var optParamDocs = map[string]string{
	"lr":                    "the learning rate; with a scheduler, the schedule sets the rate of each step (WarmupLR warms up to it)",
	"betas":                 "[beta1, beta2], the decay rates of the moving averages (OneCycle with cycle_momentum drives beta1)",
	"eps":                   "added to the denominator, as in DeepSpeed's FusedAdam and FusedLamb",
	"weight_decay":          "weight decay, applied as the type applies it (decoupled, AdamW-style, for Adam with adam_w_mode and for AdamW)",
	"adam_w_mode":           "Adam: true (DeepSpeed's default) decouples the weight decay, as AdamW; type AdamW is decoupled whatever it says",
	"bias_correction":       "divide the moving averages by 1 - beta^step",
	"amsgrad":               "must be false: FusedAdam and FusedLamb reject true too",
	"eps_inside_sqrt":       "must be false: FusedLamb rejects true too",
	"torch_adam":            "DeepSpeed's choice of torch's Adam over FusedAdam: the same math, accepted and not needed",
	"fp32_optimizer_states": "must be true when given: deepgo keeps float32 optimizer states",
	"set_grad_none":         "DeepSpeed's choice of how gradients are cleared: accepted and not needed",
	"max_coeff":             "Lamb: upper clamp of the trust ratio",
	"min_coeff":             "Lamb: lower clamp of the trust ratio",
	"momentum":              "SGD: the momentum factor",
	"dampening":             "SGD: the dampening of the momentum",
	"nesterov":              "SGD: Nesterov momentum",
}

// optParamDefault is rule's default for param key, rendered, and false when
// the param has no default in deepgo's terms (a flag accepted at one value).
func optParamDefault(r optimizerRule, key string) (string, bool) {
	d := r.def
	switch key {
	case "lr":
		return fmtNum(d.LR), true
	case "betas":
		return fmt.Sprintf("[%s, %s]", fmtNum(d.Beta1), fmtNum(d.Beta2)), true
	case "eps":
		return fmtNum(d.Eps), true
	case "weight_decay":
		return fmtNum(d.WeightDecay), true
	case "adam_w_mode":
		return fmt.Sprint(d.AdamWMode || r.forceAdamW), true
	case "bias_correction":
		return fmt.Sprint(d.BiasCorrection), true
	case "max_coeff":
		return fmtNum(d.MaxCoeff), true
	case "min_coeff":
		return fmtNum(d.MinCoeff), true
	case "momentum":
		return fmtNum(d.Momentum), true
	case "dampening":
		return fmtNum(d.Dampening), true
	case "nesterov":
		return fmt.Sprint(d.Nesterov), true
	}
	return "", false
}

// explainOptimizerTypes are the types Explain lists, in this order.
var explainOptimizerTypes = []string{"Adam", "AdamW", "Lamb", "Lion", "SGD"}

// schedParam is one scheduler param: the types that take it, with the
// default of each ("required" when it has none).
type schedParam struct {
	doc   string
	types [][2]string // {type, default}
}

// schedParamDocs are DeepSpeed's lr_schedules.py keyword arguments as deepgo
// reads them (ParseScheduler).
var schedParamDocs = map[string]schedParam{
	keyLastBatchIteration: {"the step count the schedule starts from (-1: before the first step)",
		[][2]string{{"WarmupLR", "-1"}, {"WarmupDecayLR", "-1"}, {"WarmupCosineLR", "-1"}, {"OneCycle", "-1"}, {"LRRangeTest", "-1"}}},
	keyWarmupMinLR: {"the rate the warmup starts from (the first two steps use it)",
		[][2]string{{"WarmupLR", "0"}, {"WarmupDecayLR", "0"}}},
	keyWarmupMaxLR: {"the rate the warmup reaches",
		[][2]string{{"WarmupLR", "the optimizer's lr"}, {"WarmupDecayLR", "0.001 (not the optimizer's lr, as in DeepSpeed)"}}},
	keyWarmupNumSteps: {"the steps of the warmup (raised to 2 if below, as DeepSpeed does; 0, which DeepSpeed 0.19.8 refuses, is a warning)",
		[][2]string{{"WarmupLR", "1000"}, {"WarmupDecayLR", "1000"}, {"WarmupCosineLR", "1000"}}},
	keyWarmupType: {`"log" or "linear": the shape of the warmup (another string falls back to "log" with a warning)`,
		[][2]string{{"WarmupLR", `"log"`}, {"WarmupDecayLR", `"log"`}, {"WarmupCosineLR", `"log"`}}},
	keyTotalNumSteps: {"the step the decay reaches its end at",
		[][2]string{{"WarmupDecayLR", "required"}, {"WarmupCosineLR", "required"}}},
	keyWarmupMinRatio: {"the warmup's start, as a fraction of the optimizer's lr (the first step uses 0, the second this)",
		[][2]string{{"WarmupCosineLR", "0"}}},
	keyCosMinRatio: {"the end of the cosine decay, as a fraction of the optimizer's lr",
		[][2]string{{"WarmupCosineLR", "0.0001"}}},
	keyCycleMinLR:           {"the cycle's lowest rate", [][2]string{{"OneCycle", "required"}}},
	keyCycleMaxLR:           {"the cycle's highest rate", [][2]string{{"OneCycle", "required"}}},
	keyDecayLRRate:          {"the rate's decay after the cycle", [][2]string{{"OneCycle", "0"}}},
	keyCycleFirstStepSize:   {"steps of the cycle's rising half", [][2]string{{"OneCycle", "2000"}}},
	keyCycleSecondStepSize:  {"steps of the cycle's falling half", [][2]string{{"OneCycle", "cycle_first_step_size"}}},
	keyCycleFirstStairCount: {"stairs of the rising half (0: continuous)", [][2]string{{"OneCycle", "0"}}},
	keyCycleSecondStairCnt:  {"stairs of the falling half", [][2]string{{"OneCycle", "cycle_first_stair_count"}}},
	keyDecayStepSize:        {"steps between decays after the cycle (0: no decay)", [][2]string{{"OneCycle", "0"}}},
	keyCycleMomentum: {"cycle the optimizer's beta1 against the rate (off, with a warning, for an optimizer without betas: SGD)",
		[][2]string{{"OneCycle", "true"}}},
	keyCycleMinMom:   {"beta1 at the cycle's highest rate", [][2]string{{"OneCycle", "0.8"}}},
	keyCycleMaxMom:   {"beta1 at the cycle's lowest rate", [][2]string{{"OneCycle", "0.9"}}},
	keyDecayMomRate:  {"beta1's growth per decay step after the cycle", [][2]string{{"OneCycle", "0"}}},
	keyLRRTMinLR:     {"the range test's starting rate", [][2]string{{"LRRangeTest", "0.001"}}},
	keyLRRTStepSize:  {"steps per increase of the rate", [][2]string{{"LRRangeTest", "2000"}}},
	keyLRRTStepRate:  {"the increase per step_size", [][2]string{{"LRRangeTest", "1"}}},
	keyLRRTStaircase: {"increase in steps rather than continuously", [][2]string{{"LRRangeTest", "false"}}},
}

// explainParam answers Explain for optimizer.params.KEY and
// scheduler.params.KEY; ok is false for any other key.
func explainParam(key string) (string, bool, error) {
	var b strings.Builder
	switch {
	case strings.HasPrefix(key, optPrefix):
		p := strings.TrimPrefix(key, optPrefix)
		doc, known := optParamDocs[p]
		if !known {
			return "", true, fmt.Errorf("config: unknown key %q: no optimizer deepgo implements takes %q (known: %s)", key, p, strings.Join(sortedKeys(optParamDocs), ", "))
		}
		fmt.Fprintf(&b, "%s\n  %s\n", key, doc)
		var takes []string
		for _, t := range explainOptimizerTypes {
			r, err := optimizerRuleFor(t)
			if err != nil || !contains(r.keys, p) {
				continue
			}
			if d, ok := optParamDefault(r, p); ok {
				t += " (default " + d + ")"
			}
			takes = append(takes, t)
		}
		fmt.Fprintf(&b, "  taken by: %s\n", strings.Join(takes, ", "))
		fmt.Fprintf(&b, "  origin: DeepSpeed (a keyword argument of the optimizer; another type's key is an error, as in DeepSpeed)\n")
		return b.String(), true, nil
	case strings.HasPrefix(key, schedPrefix):
		p := strings.TrimPrefix(key, schedPrefix)
		sp, known := schedParamDocs[p]
		if !known {
			return "", true, fmt.Errorf("config: unknown key %q: no scheduler deepgo implements takes %q (known: %s)", key, p, strings.Join(sortedKeys(schedParamDocs), ", "))
		}
		fmt.Fprintf(&b, "%s\n  %s\n", key, sp.doc)
		var takes []string
		for _, td := range sp.types {
			takes = append(takes, td[0]+" (default "+td[1]+")")
		}
		fmt.Fprintf(&b, "  taken by: %s\n", strings.Join(takes, ", "))
		fmt.Fprintf(&b, "  origin: DeepSpeed (a keyword argument of the schedule; another type's key is an error, as in DeepSpeed)\n")
		return b.String(), true, nil
	}
	return "", false, nil
}
