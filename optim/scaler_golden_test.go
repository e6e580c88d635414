package optim

import (
	"strconv"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/require"
)

// scalerGolden is one line of a loss-scaler golden file.
type scalerGolden = shareddata.LossScalerRecord

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
			require.NoError(t, err, "NewDynamicScaler(%+v)", cfg)
			require.Equal(t, rec.InitialScale, s.Scale(), "initial scale")
			require.Len(t, rec.Overflow, rec.Length, "golden record: overflow chars vs length")
			for i := 0; i < rec.Length; i++ {
				before := s.State()
				err := s.Update(rec.Overflow[i] == '1')
				if rec.Error != nil && i == rec.Error.AtIndex {
					require.Error(t, err, "call %d: want %q", i, rec.Error.Message)
					var mse *MinScaleError
					require.ErrorIs(t, err, ErrLossScaleAtMinimum, "call %d", i)
					require.ErrorAs(t, err, &mse, "call %d", i)
					require.Equal(t, before, s.State(), "call %d: state changed on error", i)
					require.Len(t, rec.ScaleAfter, i, "golden: scales before the error at %d", i)
					return
				}
				require.NoError(t, err, "call %d: unexpected error", i)
				require.Equal(t, rec.ScaleAfter[i], s.Scale(), "call %d (overflow=%c): scale", i, rec.Overflow[i])
				if mode == ScalerModeZeRO {
					require.Equal(t, rec.HysteresisAfter[i], s.Hysteresis(), "call %d (overflow=%c): hysteresis", i, rec.Overflow[i])
				}
			}
			if rec.Error != nil {
				require.Failf(t, "no error", "no error after %d calls, want one at %d", rec.Length, rec.Error.AtIndex)
			}
			require.Len(t, rec.ScaleAfter, rec.Length, "golden: scales for %d calls", rec.Length)
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
