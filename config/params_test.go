package config

import (
	"errors"
	"strings"
	"testing"
)

// TestParamWarnings: what DeepSpeed only logs is a warning here, not an error.
func TestParamWarnings(t *testing.T) {
	for _, c := range []struct{ doc, path, msg string }{
		{`{"scheduler":{"type":"WarmupLR","params":{"warmup_type":"cosine"}}}`,
			"scheduler.params.warmup_type", `"cosine": unknown warmup type, using "log"`},
		{`{"scheduler":{"type":"WarmupLR","params":{"warmup_min_lr":-0.1}}}`,
			"scheduler.params.warmup_min_lr", "negative learning rate -0.1"},
		{`{"scheduler":{"type":"WarmupCosineLR","params":{"total_num_steps":10,"cos_min_ratio":1.5}}}`,
			"scheduler.params.cos_min_ratio", "1.5 is outside [0, 1]"},
		{`{"scheduler":{"type":"WarmupDecayLR","params":{"total_num_steps":10,"warmup_num_steps":20}}}`,
			"scheduler.params.total_num_steps", "10 is less than warmup_num_steps 20"},
		{`{"optimizer":{"type":"SGD"},"scheduler":{"type":"OneCycle","params":{"cycle_min_lr":0.1,"cycle_max_lr":1}}}`,
			"scheduler.params.cycle_momentum", "optimizer has no betas"},
	} {
		c2 := mustParse(t, c.doc)
		if !warned(c2, c.path, c.msg) {
			t.Errorf("%s: no warning %q at %s: %v", c.doc, c.msg, c.path, c2.Warnings)
		}
	}
}

// TestParamTypes: DeepSpeed's name rules, and what deepgo refuses.
func TestParamTypes(t *testing.T) {
	for _, c := range []struct {
		typ, want string // want "" = accepted
	}{
		{"adam", ""}, {"ADAMW", ""}, {"Lamb", ""}, {"lion", ""}, {"SGD", ""},
		{"sgd", `did you mean "SGD"?`}, // torch.optim lookup is case-sensitive
		{"FusedAdam", `a class DeepSpeed builds, not a type name; write "Adam"`},
		{"DeepSpeedCPULion", `write "Lion"`},
		{"OneBitAdam", "1-bit Adam needs compressed communication"},
		{"RMSprop", "torch.optim.RMSprop is not implemented"},
		{"Adagrad", "Adagrad has no fused kernel yet"},
	} {
		_, err := ParseOptimizer(c.typ, nil)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.typ, err)
			}
			continue
		}
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Key != "optimizer.type" || !errors.Is(err, ErrUnsupportedOptimizer) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an optimizer.type error containing %q", c.typ, err, c.want)
		}
	}
	for _, c := range []struct{ typ, want string }{
		{"StepLR", "torch.optim.lr_scheduler.StepLR is not implemented"},
		{"warmuplr", `did you mean "WarmupLR"?`},
	} {
		_, err := ParseScheduler(c.typ, nil, []float64{1e-3}, true)
		if !errors.Is(err, ErrUnknownSchedule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.typ, err, c.want)
		}
	}
}

// TestParseDefaults: what the typed results hold when params leave things out.
func TestParseDefaults(t *testing.T) {
	o, err := ParseOptimizer("Lion", nil)
	if err != nil || o.Kind != OptimizerLion || o.Hyper != (OptimizerHyper{LR: 1e-4, Beta1: 0.9, Beta2: 0.99}) {
		t.Errorf("Lion: %+v %v", o, err)
	}
	o, err = ParseOptimizer("AdamW", map[string]any{"adam_w_mode": false, "lr": int64(1)})
	if err != nil || !o.Hyper.AdamWMode || o.Hyper.LR != 1 {
		t.Errorf("AdamW ignores adam_w_mode false: %+v %v", o, err)
	}
	s, err := ParseScheduler("WarmupLR", map[string]any{"warmup_num_steps": int64(0)}, []float64{0.5, 0.25}, true)
	if err != nil || s.Warmup == nil || s.Warmup.NumSteps != 2 || s.Warmup.MaxLR[1] != 0.25 || s.Warmup.Type != "log" || s.LastBatchIteration != -1 {
		t.Errorf("WarmupLR: %+v %v", s, err)
	}
	s, err = ParseScheduler("OneCycle", map[string]any{"cycle_min_lr": 0.1, "cycle_max_lr": []any{1.0}, "cycle_first_step_size": 10}, []float64{1}, true)
	if err != nil || s.OneCycle.SecondStepSize != 10 || s.OneCycle.MaxMom[0] != 0.9 || !s.OneCycle.CycleMomentum {
		t.Errorf("OneCycle: %+v %v", s.OneCycle, err)
	}
}
