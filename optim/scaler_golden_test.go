package optim

import (
	"errors"
	"strconv"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
)

type scalerGolden struct {
	Name   string `json:"name"`
	Params struct {
		InitScale             float64 `json:"init_scale"`
		ScaleWindow           int     `json:"scale_window"`
		MinScale              float64 `json:"min_scale"`
		DelayedShift          int     `json:"delayed_shift"`
		ConsecutiveHysteresis bool    `json:"consecutive_hysteresis"`
		RaiseErrorAtMinScale  bool    `json:"raise_error_at_min_scale"`
		ScaleFactor           float64 `json:"scale_factor"`
	} `json:"params"`
	InitialScale    float64   `json:"initial_scale"`
	Length          int       `json:"length"`
	Overflow        string    `json:"overflow"`
	ScaleAfter      []float64 `json:"scale_after"`
	HysteresisAfter []int     `json:"hysteresis_after"`
	Error           *struct {
		AtIndex int    `json:"at_index"`
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func TestDynamicScalerGoldenZeRO(t *testing.T) {
	runScalerGolden(t, "loss_scaler.deepspeedai.jsonl", ScalerModeZeRO)
}

func TestDynamicScalerGoldenFP16Optimizer(t *testing.T) {
	runScalerGolden(t, "loss_scaler.fp16_optimizer.jsonl", ScalerModeFP16Optimizer)
}

func runScalerGolden(t *testing.T, file string, mode ScalerMode) {
	recs := shareddata.ReadGolden[scalerGolden](t, file)
	matched, updates := 0, 0
	t.Logf("%-36s %6s %8s %10s %s", "case ("+file+")", "calls", "overflow", "final", "result")
	for _, rec := range recs {
		ok := t.Run(rec.Name, func(t *testing.T) {
			p := rec.Params
			cfg := DynamicScalerConfig{
				InitScale:             p.InitScale,
				ScaleFactor:           p.ScaleFactor,
				ScaleWindow:           p.ScaleWindow,
				MinScale:              p.MinScale,
				DelayedShift:          p.DelayedShift,
				ConsecutiveHysteresis: p.ConsecutiveHysteresis,
				RaiseErrorAtMin:       p.RaiseErrorAtMinScale,
				Mode:                  mode,
			}
			if mode == ScalerModeFP16Optimizer {
				cfg.DelayedShift = 0 // not part of this path; must be ignored
			}
			s, err := NewDynamicScaler(cfg)
			if err != nil {
				t.Fatalf("NewDynamicScaler(%+v): %v", cfg, err)
			}
			if s.Scale() != rec.InitialScale {
				t.Fatalf("initial scale %v, want %v", s.Scale(), rec.InitialScale)
			}
			if len(rec.Overflow) != rec.Length {
				t.Fatalf("golden record: overflow has %d chars, length %d", len(rec.Overflow), rec.Length)
			}
			for i := 0; i < rec.Length; i++ {
				before := s.State()
				err := s.Update(rec.Overflow[i] == '1')
				if rec.Error != nil && i == rec.Error.AtIndex {
					if err == nil {
						t.Fatalf("call %d: no error, want %q", i, rec.Error.Message)
					}
					var mse *MinScaleError
					if !errors.Is(err, ErrLossScaleAtMinimum) || !errors.As(err, &mse) {
						t.Fatalf("call %d: error %v does not wrap ErrLossScaleAtMinimum", i, err)
					}
					if s.State() != before {
						t.Fatalf("call %d: state changed on error: %+v -> %+v", i, before, s.State())
					}
					if len(rec.ScaleAfter) != i {
						t.Fatalf("golden has %d scales before the error at %d", len(rec.ScaleAfter), i)
					}
					return
				}
				if err != nil {
					t.Fatalf("call %d: unexpected error: %v", i, err)
				}
				if got, want := s.Scale(), rec.ScaleAfter[i]; got != want {
					t.Fatalf("call %d (overflow=%c): scale %v, want %v", i, rec.Overflow[i], got, want)
				}
				if mode == ScalerModeZeRO {
					if got, want := s.Hysteresis(), rec.HysteresisAfter[i]; got != want {
						t.Fatalf("call %d (overflow=%c): hysteresis %d, want %d", i, rec.Overflow[i], got, want)
					}
				}
			}
			if rec.Error != nil {
				t.Fatalf("no error after %d calls, want one at %d", rec.Length, rec.Error.AtIndex)
			}
			if len(rec.ScaleAfter) != rec.Length {
				t.Fatalf("golden has %d scales for %d calls", len(rec.ScaleAfter), rec.Length)
			}
		})
		n := len(rec.ScaleAfter)
		final, result := 0.0, "MISMATCH"
		if n > 0 {
			final = rec.ScaleAfter[n-1]
		}
		if ok {
			matched++
			updates += n
			result = "ok"
			if rec.Error != nil {
				result = "ok (error at call " + strconv.Itoa(rec.Error.AtIndex) + ")"
			}
		}
		ones := 0
		for _, c := range rec.Overflow {
			if c == '1' {
				ones++
			}
		}
		t.Logf("%-36s %6d %8d %10g %s", rec.Name, rec.Length, ones, final, result)
	}
	t.Logf("%s: %d/%d records matched exactly (%d scale values compared)", file, matched, len(recs), updates)
	shareddata.Checked(t, file, len(recs), len(recs))
}
