package optim

import (
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		assert.ErrorContains(t, err, c.want, "New(%s, %v)", c.typ, c.params)
		if err != nil {
			assert.ErrorIs(t, err, ErrInvalidOptimizerParam, "New(%s, %v)", c.typ, c.params)
		}
	}
	for _, typ := range []string{"OneBitAdam", "ZeroOneAdam", "OneBitLamb", "Adagrad", "RMSprop"} {
		_, err := New(typ, nil, b)
		assert.ErrorIs(t, err, ErrUnsupportedOptimizer, "New(%s)", typ)
		assert.ErrorContains(t, err, "not supported", "New(%s)", typ)
	}
	// FusedAdam & co. are classes DeepSpeed builds, not type names it accepts.
	for _, typ := range []string{"FusedAdam", "CPUAdam", "DeepSpeedCPUAdam", "FusedLion", "sgd"} {
		_, err := New(typ, nil, b)
		assert.ErrorIs(t, err, ErrUnsupportedOptimizer, "New(%s)", typ)
		assert.ErrorContains(t, err, "optimizer.type", "New(%s)", typ)
	}
	for _, typ := range []string{"adam", "AdamW", "SGD", "lamb", "Lion", "LION"} {
		o, err := New(typ, map[string]any{"lr": 0.01, "torch_adam": nil}, b)
		if !assert.NoError(t, err, "New(%s)", typ) {
			continue
		}
		o.Close()
	}
	// DeepSpeed's defaults: "Adam" is decoupled unless adam_w_mode is false
	o, _ := New("Adam", nil, b)
	h := o.Defaults()
	assert.True(t, h.AdamWMode, "Adam defaults = %+v", h)
	assert.True(t, h.BiasCorrection, "Adam defaults = %+v", h)
	assert.Equal(t, 1e-3, h.LR, "Adam defaults = %+v", h)
	assert.Equal(t, 0.999, h.Beta2, "Adam defaults = %+v", h)
	assert.Equal(t, 1e-8, h.Eps, "Adam defaults = %+v", h)
	o.Close()
}

func TestStepArgumentErrors(t *testing.T) {
	b := newCPU(t, 1)
	o, err := New("AdamW", nil, b)
	require.NoError(t, err)
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
		assert.ErrorContains(t, o.Step(c.g, c.lr, 1), c.want, c.name)
	}
	got := getHost(t, p[0])
	assert.Equal(t, []float64{1, 6}, []float64{got[0], got[5]}, "a rejected Step changed params %v", got)
	assert.Zero(t, o.Steps("g"), "a rejected Step changed steps")
	assert.ErrorContains(t, o.Step(ParamGroup{Name: "g", Params: p, Grads: good}, 1e-3, 0), "gradScale 0")
	// the group's state is sized by its first step; a resized group is refused
	require.NoError(t, o.Step(ParamGroup{Name: "g", Params: p, Grads: good}, 1e-3, 1))
	err = o.Step(ParamGroup{Name: "g", Params: p[:1], Grads: good[:1]}, 1e-3, 1)
	assert.ErrorContains(t, err, "has 2 tensors, the group now has 1 params", "resized group")
}

func TestUnscaleCheck(t *testing.T) {
	k := NewCPUKernels(newCPU(t, 2))
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16} {
		a, c := mustEmpty(t, dt, 1000), mustEmpty(t, dt, 37)
		setHost(t, a, randVals(newRand(), 1000, 64))
		setHost(t, c, randVals(newRand(), 37, 64))
		want := getHost(t, a)
		found, err := k.UnscaleCheck([]*tensor.Tensor{a, c}, 64)
		require.NoError(t, err, dt)
		require.False(t, found, "%v: found an overflow", dt)
		got := getHost(t, a)
		for i := range got {
			w := float64(tensor.ToHalfPrecision(dt, float32(want[i])*(1.0/64)))
			require.Equal(t, w, got[i], "%v: [%d]", dt, i)
		}
		setHost(t, c, append(make([]float32, 36), float32(1e38)))
		found, _ = k.UnscaleCheck([]*tensor.Tensor{a, c}, 1e-3) // 1e41 overflows
		assert.True(t, found, "%v: overflow not found", dt)
	}
	_, err := k.UnscaleCheck(nil, -1)
	assert.Error(t, err, "negative scale accepted")
}
