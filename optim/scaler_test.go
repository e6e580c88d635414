package optim

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestStaticScaler(t *testing.T) {
	s, err := NewStaticScaler(128)
	if err != nil {
		t.Fatal(err)
	}
	for _, of := range []bool{true, false, true} {
		if err := s.Update(of); err != nil || s.Scale() != 128 {
			t.Fatalf("Update(%v): scale %v, err %v", of, s.Scale(), err)
		}
	}
	var ls LossScaler = s
	if ls.Dynamic() {
		t.Fatal("static scaler reports Dynamic")
	}
	if err := s.SetState(ScalerState{CurScale: 8}); err != nil || s.Scale() != 8 {
		t.Fatalf("SetState: %v, scale %v", err, s.Scale())
	}
	if err := s.SetState(ScalerState{Dynamic: true, CurScale: 8}); err == nil {
		t.Fatal("static scaler loaded a dynamic state")
	}
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, err := NewStaticScaler(bad); !errors.Is(err, ErrInvalidScalerConfig) {
			t.Fatalf("NewStaticScaler(%v): %v", bad, err)
		}
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
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidScalerConfig) {
				t.Fatalf("error %v, want one containing %q wrapping ErrInvalidScalerConfig", err, tc.want)
			}
		})
	}
	// Hysteresis is not part of the fp16 optimizer path.
	cfg := base
	cfg.Mode, cfg.DelayedShift = ScalerModeFP16Optimizer, 0
	if _, err := NewDynamicScaler(cfg); err != nil {
		t.Fatalf("fp16_optimizer mode with DelayedShift 0: %v", err)
	}
	// A zero ScaleFactor means DeepSpeed's 2.
	cfg = base
	cfg.ScaleFactor = 0
	s, err := NewDynamicScaler(cfg)
	if err != nil || s.Config().ScaleFactor != 2 {
		t.Fatalf("ScaleFactor 0: %v, %+v", err, s.Config())
	}
}

func TestDynamicScalerMinScaleError(t *testing.T) {
	s, err := NewDynamicScaler(DynamicScalerConfig{InitScale: 2, ScaleWindow: 10, MinScale: 1, DelayedShift: 1, RaiseErrorAtMin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(true); err != nil || s.Scale() != 1 {
		t.Fatalf("first overflow: %v, scale %v", err, s.Scale())
	}
	err = s.Update(true)
	var mse *MinScaleError
	if !errors.As(err, &mse) || !errors.Is(err, ErrLossScaleAtMinimum) || mse.Iter != 1 || mse.Scale != 1 {
		t.Fatalf("error %#v", err)
	}
	for _, hint := range []string{"Current loss scale already at minimum", "lower the learning rate", "bf16", "inf/nan"} {
		if !strings.Contains(err.Error(), hint) {
			t.Errorf("message %q lacks %q", err, hint)
		}
	}
	// Without RaiseErrorAtMin the scale just stays at the floor.
	s, _ = NewDynamicScaler(DynamicScalerConfig{InitScale: 1, ScaleWindow: 10, MinScale: 1, DelayedShift: 1})
	if err := s.Update(true); err != nil || s.Scale() != 1 {
		t.Fatalf("no-raise: %v, scale %v", err, s.Scale())
	}
}

func TestDynamicScalerStateRoundTrip(t *testing.T) {
	cfg := DefaultDynamicScalerConfig()
	cfg.ScaleWindow = 3
	pattern := "0010001100000000100000000000011"
	a, _ := NewDynamicScaler(cfg)
	for _, c := range pattern[:13] {
		if err := a.Update(c == '1'); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := json.Marshal(a.State())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"cur_scale":`, `"cur_iter":13`, `"last_overflow_iter":`, `"cur_hysteresis":`, `"dynamic":true`} {
		if !strings.Contains(string(raw), key) {
			t.Fatalf("state JSON %s lacks %s", raw, key)
		}
	}
	var st ScalerState
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	b, _ := NewDynamicScaler(cfg)
	if err := b.SetState(st); err != nil {
		t.Fatal(err)
	}
	for i, c := range pattern[13:] {
		if err := a.Update(c == '1'); err != nil {
			t.Fatal(err)
		}
		if err := b.Update(c == '1'); err != nil {
			t.Fatal(err)
		}
		if a.State() != b.State() {
			t.Fatalf("call %d: %+v vs %+v", 13+i, a.State(), b.State())
		}
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
		if err := b.SetState(st); !errors.Is(err, ErrInvalidScalerConfig) {
			t.Errorf("SetState(%+v): %v", st, err)
		}
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
		if got := ClipCoefficient(tc.norm, tc.max); got != tc.want {
			t.Errorf("ClipCoefficient(%v, %v) = %v, want %v", tc.norm, tc.max, got, tc.want)
		}
	}
	// CombinedScale: unscaled norm 4 with clip 1 under scale 1024.
	if got, want := CombinedScale(4096, 1024, 1), div(div(4096, 1024)+eps, 1)*1024; got != want {
		t.Errorf("CombinedScale clip = %v, want %v", got, want)
	}
	for _, tc := range [][3]float64{{512, 1024, 1}, {4096, 1024, 0}, {math.Inf(1), 1024, 1}} {
		if got := CombinedScale(tc[0], tc[1], tc[2]); got != tc[1] {
			t.Errorf("CombinedScale(%v) = %v, want the loss scale", tc, got)
		}
	}
	// Both forms clip to the same unscaled norm.
	g := 4096.0 / CombinedScale(4096, 1024, 1)
	h := 4.0 * ClipCoefficient(4, 1)
	if math.Abs(g-h) > 1e-15 {
		t.Errorf("clipped norms differ: %v vs %v", g, h)
	}
}
