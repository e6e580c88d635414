package optim

import (
	"errors"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
)

func TestNewConfigErrors(t *testing.T) {
	b := newCPU(t, 1)
	for _, c := range []struct {
		typ    string
		params map[string]any
		want   string
	}{
		{"Adam", map[string]any{"lr": -0.1}, "optimizer.params.lr: -0.1: must be finite and >= 0"},
		{"AdamW", map[string]any{"betas": []any{0.9, 1.5}}, "optimizer.params.betas[1]: 1.5: must be in [0, 1)"},
		{"Lamb", map[string]any{"betas": []any{-0.1, 0.9}}, "optimizer.params.betas[0]: -0.1: must be in [0, 1)"},
		{"Adam", map[string]any{"betas": []any{0.9}}, "optimizer.params.betas: [0.9]: must be a list of two numbers"},
		{"Adam", map[string]any{"eps": "x"}, `optimizer.params.eps: "x": must be a number`},
		{"Adam", map[string]any{"lr": "auto"}, `optimizer.params.lr: "auto": "auto" must be resolved`},
		{"Adam", map[string]any{"momentum": 0.9}, "optimizer.params.momentum: 0.9: unknown parameter for adam (allowed: lr, betas"},
		{"Adam", map[string]any{"max_grad_norm": 1.0}, `use the top-level "gradient_clipping"`},
		{"Adam", map[string]any{"amsgrad": true}, "optimizer.params.amsgrad: true: not supported"},
		{"Adam", map[string]any{"adam_w_mode": 1}, "optimizer.params.adam_w_mode: 1: must be true or false"},
		{"SGD", map[string]any{"nesterov": true}, "optimizer.params.nesterov: true: needs momentum > 0"},
		{"SGD", map[string]any{"dampening": 2.0}, "optimizer.params.dampening: 2: must be in [0, 1]"},
		{"Lamb", map[string]any{"min_coeff": 5.0, "max_coeff": 1.0}, "optimizer.params.min_coeff: 5: must be <= max_coeff"},
		{"Lion", map[string]any{"weight_decay": -1.0}, "optimizer.params.weight_decay: -1: must be finite and >= 0"},
	} {
		_, err := New(c.typ, c.params, b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%s, %v) = %v, want error containing %q", c.typ, c.params, err, c.want)
		}
		if err != nil && !errors.Is(err, ErrInvalidOptimizerParam) {
			t.Errorf("New(%s, %v): %v does not match ErrInvalidOptimizerParam", c.typ, c.params, err)
		}
	}
	for _, typ := range []string{"OneBitAdam", "ZeroOneAdam", "OneBitLamb", "Adagrad", "RMSprop"} {
		_, err := New(typ, nil, b)
		if !errors.Is(err, ErrUnsupportedOptimizer) || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("New(%s) = %v, want ErrUnsupportedOptimizer", typ, err)
		}
	}
	// FusedAdam & co. are classes DeepSpeed builds, not type names it accepts.
	for _, typ := range []string{"FusedAdam", "CPUAdam", "DeepSpeedCPUAdam", "FusedLion", "sgd"} {
		_, err := New(typ, nil, b)
		if !errors.Is(err, ErrUnsupportedOptimizer) || !strings.Contains(err.Error(), "optimizer.type") {
			t.Errorf("New(%s) = %v, want ErrUnsupportedOptimizer", typ, err)
		}
	}
	for _, typ := range []string{"adam", "AdamW", "SGD", "lamb", "Lion", "LION"} {
		o, err := New(typ, map[string]any{"lr": 0.01, "torch_adam": nil}, b)
		if err != nil {
			t.Errorf("New(%s): %v", typ, err)
			continue
		}
		o.Close()
	}
	// DeepSpeed's defaults: "Adam" is decoupled unless adam_w_mode is false
	o, _ := New("Adam", nil, b)
	if h := o.Defaults(); !h.AdamWMode || !h.BiasCorrection || h.LR != 1e-3 || h.Beta2 != 0.999 || h.Eps != 1e-8 {
		t.Errorf("Adam defaults = %+v", h)
	}
	o.Close()
}

func TestStepArgumentErrors(t *testing.T) {
	b := newCPU(t, 1)
	o, err := New("AdamW", nil, b)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	f32 := func(n int) *tensor.Tensor { return mustEmpty(t, tensor.Float32, n) }
	p := []*tensor.Tensor{f32(6), f32(3)}
	setHost(t, p[0], []float32{1, 2, 3, 4, 5, 6})
	good := []*tensor.Tensor{f32(6), f32(3)}
	for _, c := range []struct {
		name string
		g    ParamGroup
		lr   float64
		want string
	}{
		{"lengths", ParamGroup{Params: p, Grads: good[:1]}, 1e-3, "grads has 1 entries, params has 2"},
		{"sizes", ParamGroup{Params: p, Grads: []*tensor.Tensor{f32(5), f32(3)}}, 1e-3, "grads[0] float32[5]@cpu has 5 elements, params[0] float32[6]@cpu has 6"},
		{"grad dtypes", ParamGroup{Params: p, Grads: []*tensor.Tensor{f32(6), mustEmpty(t, tensor.Float16, 3)}}, 1e-3, "grads[1] dtype float16, want float32 like grads[0]"},
		{"int params", ParamGroup{Params: []*tensor.Tensor{mustEmpty(t, tensor.Int32, 6)}, Grads: good[:1]}, 1e-3, "params[0] dtype int32: allowed"},
		{"copies len", ParamGroup{Params: p, Grads: good, Copies: good[:1]}, 1e-3, "copies has 1 entries, params has 2"},
		{"copy dtype", ParamGroup{Params: p, Grads: good, Copies: good}, 1e-3, "copies[0] dtype float32: allowed [float16 bfloat16]"},
		{"copy with bf16 params", ParamGroup{Params: []*tensor.Tensor{mustEmpty(t, tensor.BFloat16, 6)}, Grads: good[:1], Copies: []*tensor.Tensor{mustEmpty(t, tensor.BFloat16, 6)}}, 1e-3, "copies need float32 master params"},
		{"nil grad", ParamGroup{Params: p, Grads: []*tensor.Tensor{nil, f32(3)}}, 1e-3, "grads[0] is nil"},
		{"negative lr", ParamGroup{Params: p, Grads: good}, -1, "lr -1: must be finite and >= 0"},
		{"group betas", ParamGroup{Params: p, Grads: good, Hyper: &Hyper{Beta1: 0.9, Beta2: 1}}, 1e-3, "ParamGroup.Hyper.betas[1]: 1: must be in [0, 1)"},
	} {
		c.g.Name = "g"
		err := o.Step(c.g, c.lr, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Step = %v, want error containing %q", c.name, err, c.want)
		}
	}
	if got := getHost(t, p[0]); got[0] != 1 || got[5] != 6 || o.Steps("g") != 0 {
		t.Errorf("a rejected Step changed params %v or steps %d", got, o.Steps("g"))
	}
	if err := o.Step(ParamGroup{Name: "g", Params: p, Grads: good}, 1e-3, 0); err == nil || !strings.Contains(err.Error(), "gradScale 0") {
		t.Errorf("gradScale 0: %v", err)
	}
	// the group's state is sized by its first step; a resized group is refused
	if err := o.Step(ParamGroup{Name: "g", Params: p, Grads: good}, 1e-3, 1); err != nil {
		t.Fatal(err)
	}
	err = o.Step(ParamGroup{Name: "g", Params: p[:1], Grads: good[:1]}, 1e-3, 1)
	if err == nil || !strings.Contains(err.Error(), "has 2 tensors, the group now has 1 params") {
		t.Errorf("resized group: %v", err)
	}
}

func TestUnscaleCheck(t *testing.T) {
	k := NewCPUKernels(newCPU(t, 2))
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16} {
		a, c := mustEmpty(t, dt, 1000), mustEmpty(t, dt, 37)
		setHost(t, a, randVals(newRand(), 1000, 64))
		setHost(t, c, randVals(newRand(), 37, 64))
		want := getHost(t, a)
		found, err := k.UnscaleCheck([]*tensor.Tensor{a, c}, 64)
		if err != nil || found {
			t.Fatalf("%v: found %v, err %v", dt, found, err)
		}
		got := getHost(t, a)
		for i := range got {
			if w := float64(tensor.ToHalfPrecision(dt, float32(want[i])*(1.0/64))); got[i] != w {
				t.Fatalf("%v: [%d] = %g, want %g", dt, i, got[i], w)
			}
		}
		setHost(t, c, append(make([]float32, 36), float32(1e38)))
		if found, _ := k.UnscaleCheck([]*tensor.Tensor{a, c}, 1e-3); !found { // 1e41 overflows
			t.Errorf("%v: overflow not found", dt)
		}
	}
	if _, err := k.UnscaleCheck(nil, -1); err == nil {
		t.Error("negative scale accepted")
	}
}
