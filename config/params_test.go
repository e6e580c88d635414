package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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
		{`{"optimizer":{"type":"AdamW","params":{"lr":0.0003}},"scheduler":{"type":"WarmupDecayLR","params":{"total_num_steps":100}}}`,
			"scheduler.params.warmup_max_lr", "not given: WarmupDecayLR warms up to its default 0.001, not to the optimizer's lr 0.0003"},
	} {
		c2 := mustParse(t, c.doc)
		assert.True(t, warned(c2, c.path, c.msg), "%s: no warning %q at %s: %v", c.doc, c.msg, c.path, c2.Warnings)
	}
	// the optimizer's lr is WarmupDecayLR's default anyway: nothing to say
	c := mustParse(t, `{"optimizer":{"type":"AdamW","params":{"lr":0.001}},"scheduler":{"type":"WarmupDecayLR","params":{"total_num_steps":100}}}`)
	assert.False(t, warned(c, "scheduler.params.warmup_max_lr", ""), "%v", c.Warnings)
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
			assert.NoError(t, err, c.typ)
			continue
		}
		var pe *ParamError
		if assert.ErrorAs(t, err, &pe, c.typ) {
			assert.Equal(t, "optimizer.type", pe.Key, c.typ)
		}
		assert.ErrorIs(t, err, ErrUnsupportedOptimizer, c.typ)
		assert.ErrorContains(t, err, c.want, c.typ)
	}
	for _, c := range []struct{ typ, want string }{
		{"StepLR", "torch.optim.lr_scheduler.StepLR is not implemented"},
		{"warmuplr", `did you mean "WarmupLR"?`},
	} {
		_, err := ParseScheduler(c.typ, nil, []float64{1e-3}, true)
		assert.ErrorIs(t, err, ErrUnknownSchedule, c.typ)
		assert.ErrorContains(t, err, c.want, c.typ)
	}
}

// TestParseDefaults: what the typed results hold when params leave things out.
func TestParseDefaults(t *testing.T) {
	o, err := ParseOptimizer("Lion", nil)
	if assert.NoError(t, err, "Lion") {
		assert.Equal(t, OptimizerLion, o.Kind, "Lion")
		assert.Equal(t, OptimizerHyper{LR: 1e-4, Beta1: 0.9, Beta2: 0.99}, o.Hyper, "Lion")
	}
	o, err = ParseOptimizer("AdamW", map[string]any{"adam_w_mode": false, "lr": int64(1)})
	if assert.NoError(t, err, "AdamW") {
		assert.True(t, o.Hyper.AdamWMode, "AdamW ignores adam_w_mode false")
		assert.Equal(t, 1.0, o.Hyper.LR, "AdamW lr")
	}
	s, err := ParseScheduler("WarmupLR", map[string]any{"warmup_num_steps": int64(0)}, []float64{0.5, 0.25}, true)
	if assert.NoError(t, err, "WarmupLR") && assert.NotNil(t, s.Warmup, "WarmupLR") {
		assert.Equal(t, 2, s.Warmup.NumSteps, "WarmupLR: %+v", s.Warmup)
		assert.Equal(t, 0.25, s.Warmup.MaxLR[1], "WarmupLR: %+v", s.Warmup)
		assert.Equal(t, "log", s.Warmup.Type, "WarmupLR: %+v", s.Warmup)
		assert.Equal(t, -1, s.LastBatchIteration, "WarmupLR")
	}
	s, err = ParseScheduler("OneCycle", map[string]any{"cycle_min_lr": 0.1, "cycle_max_lr": []any{1.0}, "cycle_first_step_size": 10}, []float64{1}, true)
	if assert.NoError(t, err, "OneCycle") {
		assert.Equal(t, 10.0, s.OneCycle.SecondStepSize, "OneCycle: %+v", s.OneCycle)
		assert.Equal(t, 0.9, s.OneCycle.MaxMom[0], "OneCycle: %+v", s.OneCycle)
		assert.True(t, s.OneCycle.CycleMomentum, "OneCycle: %+v", s.OneCycle)
	}
}

// Every bad scheduler param is reported too, unknown keys included; a
// first half (or stair count) that does not read leaves the second half's
// default valid, so it adds no error of its own.
func TestSchedulerParamsAllReported(t *testing.T) {
	params := map[string]any{"cycle_min_lr": "x", "cycle_max_lr": 0.01, "cycle_first_step_size": -5.0,
		"cycle_first_stair_count": int64(-1), "warmup_foo": 1.0, "warmup_bar": 1.0, "decay_step_size": -2.0,
		"last_batch_iteration": int64(-4)}
	_, err := ParseScheduler(ScheduleOneCycle, params, []float64{1e-3}, true)
	assert.ErrorIs(t, err, ErrInvalidScheduleParam)
	want := []string{"warmup_bar", "warmup_foo", "cycle_first_step_size", "cycle_first_stair_count", "decay_step_size",
		"cycle_min_lr", "last_batch_iteration"}
	for _, k := range want {
		assert.ErrorContains(t, err, "scheduler.params."+k+":")
	}
	assert.Len(t, strings.Split(err.Error(), "\n"), len(want), "one line per bad key: %v", err)
	assert.NotContains(t, err.Error(), "scheduler.params.cycle_second", "the second half's default follows a first that did not read")
	for typ, params := range map[string]map[string]any{
		ScheduleWarmupDecayLR:  {"warmup_num_steps": -1.0, "warmup_max_lr": "x", "total_num_steps": "y"},
		ScheduleWarmupCosineLR: {"warmup_num_steps": -1.0, "cos_min_ratio": "x", "total_num_steps": "y"},
		ScheduleLRRangeTest:    {"lr_range_test_step_size": 0.0, "lr_range_test_min_lr": "x", "lr_range_test_staircase": 1.0},
	} {
		_, err := ParseScheduler(typ, params, []float64{1e-3}, true)
		for k := range params {
			assert.ErrorContains(t, err, "scheduler.params."+k+":", typ)
		}
	}
}

// Every bad optimizer param is reported, by ParseOptimizer (joined
// *ParamErrors, the first in key order for errors.As) and by Parse (one
// FieldError each), not only the first.
func TestOptimizerParamsAllReported(t *testing.T) {
	params := map[string]any{"lr": -1.0, "betas": []any{2.0, 0.9}, "eps": -1.0, "weight_decay": "x"}
	_, err := ParseOptimizer("AdamW", params)
	assert.ErrorIs(t, err, ErrInvalidOptimizerParam)
	var pe *ParamError
	if assert.ErrorAs(t, err, &pe) {
		assert.Equal(t, "optimizer.params.weight_decay", pe.Key, "a value that does not read comes first")
	}
	want := []string{"optimizer.params.weight_decay", "optimizer.params.lr", "optimizer.params.betas[0]", "optimizer.params.eps"}
	for _, k := range want {
		assert.ErrorContains(t, err, k+":")
	}
	// a key that does not read is not compared with another
	_, err = ParseOptimizer("Lamb", map[string]any{"max_coeff": -3.0, "min_coeff": "x"})
	assert.ErrorContains(t, err, "optimizer.params.max_coeff: -3")
	assert.ErrorContains(t, err, `optimizer.params.min_coeff: "x"`)
	assert.NotContains(t, err.Error(), "must be <= max_coeff", "min_coeff did not read: not compared")
	_, err = ParseOptimizer("Lamb", map[string]any{"max_coeff": -3.0})
	assert.ErrorContains(t, err, "optimizer.params.max_coeff: -3")
	assert.NotContains(t, err.Error(), "min_coeff", "max_coeff out of range: not compared with min_coeff's default")
	_, err = Parse([]byte(`{"optimizer": {"type": "AdamW", "params": {"lr": -1, "betas": [2, 0.9], "eps": -1, "weight_decay": "x"}}}`))
	var es Errors
	if assert.ErrorAs(t, err, &es) {
		var got []string
		for _, e := range es {
			got = append(got, e.Path)
		}
		assert.Equal(t, want, got)
	}
}

// warmup_num_steps 0 trains over 2 steps, as DeepSpeed before 0.19.8 did,
// and says that 0.19.8 refuses it; 1 is raised to 2 without a word, as in
// every release, and so is an unresolved "auto" read loosely.
func TestWarmupZeroSteps(t *testing.T) {
	for _, c := range []struct {
		v    any
		warn bool
	}{{0.0, true}, {int64(0), true}, {1.0, false}, {5.0, false}} {
		for _, typ := range []string{ScheduleWarmupLR, ScheduleWarmupDecayLR, ScheduleWarmupCosineLR} {
			params := map[string]any{"warmup_num_steps": c.v}
			if typ != ScheduleWarmupLR {
				params["total_num_steps"] = 10.0
			}
			s, err := ParseScheduler(typ, params, []float64{1e-3}, true)
			if !assert.NoError(t, err, "%s %v", typ, c.v) {
				continue
			}
			got := fmt.Sprint(s.Warnings)
			if c.warn {
				assert.Contains(t, got, "DeepSpeed 0.19.8 refuses it", "%s %v", typ, c.v)
			} else {
				assert.NotContains(t, got, "warmup_num_steps", "%s %v", typ, c.v)
			}
		}
	}
}
