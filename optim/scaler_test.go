package optim

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStaticScaler(t *testing.T) {
	s, err := NewStaticScaler(128)
	require.NoError(t, err)
	for _, of := range []bool{true, false, true} {
		require.NoError(t, s.Update(of), "Update(%v)", of)
		require.Equal(t, 128.0, s.Scale(), "Update(%v)", of)
	}
	var ls LossScaler = s
	require.False(t, ls.Dynamic(), "static scaler reports Dynamic")
	require.NoError(t, s.SetState(ScalerState{CurScale: 8}), "SetState")
	require.Equal(t, 8.0, s.Scale(), "SetState")
	require.Error(t, s.SetState(ScalerState{Dynamic: true, CurScale: 8}), "static scaler loaded a dynamic state")
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		_, err := NewStaticScaler(bad)
		require.ErrorIs(t, err, ErrInvalidScalerConfig, "NewStaticScaler(%v)", bad)
	}
}

func TestDynamicScalerConfigErrors(t *testing.T) {
	base := DefaultDynamicScalerConfig()
	tests := []struct {
		name string
		mod  func(*DynamicScalerConfig)
		want string
	}{
		{"zero init", func(c *DynamicScalerConfig) { c.InitScale = 0 }, "InitScale: 0: must be a positive finite number"},
		{"inf init", func(c *DynamicScalerConfig) { c.InitScale = math.Inf(1) }, "InitScale: +Inf"},
		{"negative min", func(c *DynamicScalerConfig) { c.MinScale = -1 }, "MinScale: -1: must be a positive finite number"},
		{"factor 1", func(c *DynamicScalerConfig) { c.ScaleFactor = 1 }, "ScaleFactor: 1: must be a finite number > 1"},
		{"window 0", func(c *DynamicScalerConfig) { c.ScaleWindow = 0 }, "ScaleWindow (fp16.loss_scale_window): 0: must be >= 1"},
		{"hysteresis 0", func(c *DynamicScalerConfig) { c.DelayedShift = 0 }, "DelayedShift (fp16.hysteresis): 0: must be >= 1"},
		{"bad mode", func(c *DynamicScalerConfig) { c.Mode = 7 }, "Mode: ScalerMode(7)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mod(&cfg)
			_, err := NewDynamicScaler(cfg)
			require.ErrorContains(t, err, tc.want)
			require.ErrorIs(t, err, ErrInvalidScalerConfig)
		})
	}
	// Hysteresis is not part of the fp16 optimizer path.
	cfg := base
	cfg.Mode, cfg.DelayedShift = ScalerModeFP16Optimizer, 0
	_, err := NewDynamicScaler(cfg)
	require.NoError(t, err, "fp16_optimizer mode with DelayedShift 0")
	// A zero ScaleFactor means DeepSpeed's 2.
	cfg = base
	cfg.ScaleFactor = 0
	s, err := NewDynamicScaler(cfg)
	require.NoError(t, err, "ScaleFactor 0")
	require.Equal(t, 2.0, s.Config().ScaleFactor, "ScaleFactor 0: %+v", s.Config())
}

func TestDynamicScalerMinScaleError(t *testing.T) {
	s, err := NewDynamicScaler(DynamicScalerConfig{InitScale: 2, ScaleWindow: 10, MinScale: 1, DelayedShift: 1, RaiseErrorAtMin: true})
	require.NoError(t, err)
	require.NoError(t, s.Update(true), "first overflow")
	require.Equal(t, 1.0, s.Scale(), "first overflow")
	err = s.Update(true)
	var mse *MinScaleError
	require.ErrorAs(t, err, &mse)
	require.ErrorIs(t, err, ErrLossScaleAtMinimum)
	require.Equal(t, MinScaleError{Scale: 1, Iter: 1}, *mse)
	for _, hint := range []string{"Current loss scale already at minimum", "lower the learning rate", "bf16", "inf/nan"} {
		assert.ErrorContains(t, err, hint)
	}
	// Without RaiseErrorAtMin the scale just stays at the floor.
	s, _ = NewDynamicScaler(DynamicScalerConfig{InitScale: 1, ScaleWindow: 10, MinScale: 1, DelayedShift: 1})
	require.NoError(t, s.Update(true), "no-raise")
	require.Equal(t, 1.0, s.Scale(), "no-raise")
}

func TestDynamicScalerStateRoundTrip(t *testing.T) {
	cfg := DefaultDynamicScalerConfig()
	cfg.ScaleWindow = 3
	pattern := "0010001100000000100000000000011"
	a, _ := NewDynamicScaler(cfg)
	for _, c := range pattern[:13] {
		require.NoError(t, a.Update(c == '1'))
	}
	raw, err := json.Marshal(a.State())
	require.NoError(t, err)
	for _, key := range []string{`"cur_scale":`, `"cur_iter":13`, `"last_overflow_iter":`, `"cur_hysteresis":`, `"dynamic":true`} {
		require.Contains(t, string(raw), key, "state JSON")
	}
	var st ScalerState
	require.NoError(t, json.Unmarshal(raw, &st))
	b, _ := NewDynamicScaler(cfg)
	require.NoError(t, b.SetState(st))
	for i, c := range pattern[13:] {
		require.NoError(t, a.Update(c == '1'))
		require.NoError(t, b.Update(c == '1'))
		require.Equal(t, a.State(), b.State(), "call %d", 13+i)
	}
	bad := []ScalerState{
		{Dynamic: false, CurScale: 1, LastOverflowIter: -1, CurHysteresis: 1},
		{Dynamic: true, CurScale: 0, LastOverflowIter: -1, CurHysteresis: 1},
		{Dynamic: true, CurScale: 1, CurIter: 3, LastOverflowIter: 3, CurHysteresis: 1},
		{Dynamic: true, CurScale: 1, CurIter: 3, LastOverflowIter: -2, CurHysteresis: 1},
		{Dynamic: true, CurScale: 1, CurIter: 3, LastOverflowIter: 1, CurHysteresis: 0},
		{Dynamic: true, CurScale: 1, CurIter: 3, LastOverflowIter: 1, CurHysteresis: 3},
	}
	for _, st := range bad {
		assert.ErrorIs(t, b.SetState(st), ErrInvalidScalerConfig, "SetState(%+v)", st)
	}
}

// div and eps keep the expected values in float64 arithmetic (untyped
// constant expressions would be computed exactly).
func div(a, b float64) float64 { return a / b }

var eps = 1e-6

func TestClip(t *testing.T) {
	tests := []struct {
		norm, max, want float64
	}{
		{0.5, 1, 1},
		{1, 1, div(1, 1+eps)},
		{4, 1, div(1, 4+eps)},
		{4, 0, 1},
		{4, -1, 1},
		{math.Inf(1), 1, 1},
		{math.NaN(), 1, 1},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, ClipCoefficient(tc.norm, tc.max), "ClipCoefficient(%v, %v)", tc.norm, tc.max)
	}
	// CombinedScale: unscaled norm 4 with clip 1 under scale 1024.
	assert.Equal(t, div(div(4096, 1024)+eps, 1)*1024, CombinedScale(4096, 1024, 1), "CombinedScale clip")
	for _, tc := range [][3]float64{{512, 1024, 1}, {4096, 1024, 0}, {math.Inf(1), 1024, 1}} {
		assert.Equal(t, tc[1], CombinedScale(tc[0], tc[1], tc[2]), "CombinedScale(%v): want the loss scale", tc)
	}
	// Both forms clip to the same unscaled norm.
	g := 4096.0 / CombinedScale(4096, 1024, 1)
	h := 4.0 * ClipCoefficient(4, 1)
	assert.InDelta(t, h, g, 1e-15, "clipped norms differ")
}
