package optim

import (
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
)

// TestGoldenLegacyDifferences runs the inputs of the older DeepSpeed golden
// files (loss_scaler.jsonl, lr_schedules.jsonl; microsoft/DeepSpeed
// 2025-02) through the deepspeedai 0.19.x behaviour implemented here and
// logs where and why the outputs differ. It asserts nothing about the old
// values: those files exist to explain differences, not to be matched.
func TestGoldenLegacyDifferences(t *testing.T) {
	t.Run("loss_scaler", func(t *testing.T) {
		recs := shareddata.ReadGolden[scalerGolden](t, "loss_scaler.jsonl")
		same := 0
		for _, rec := range recs {
			p := rec.Params
			s, err := NewDynamicScaler(DynamicScalerConfig{InitScale: p.InitScale, ScaleFactor: p.ScaleFactor,
				ScaleWindow: p.ScaleWindow, MinScale: p.MinScale, DelayedShift: p.DelayedShift,
				ConsecutiveHysteresis: p.ConsecutiveHysteresis, RaiseErrorAtMin: p.RaiseErrorAtMinScale})
			if err != nil {
				t.Fatalf("%s: %v", rec.Name, err)
			}
			diff := ""
			for i := 0; i < rec.Length && diff == ""; i++ {
				err := s.Update(rec.Overflow[i] == '1')
				switch {
				case err != nil || (rec.Error != nil && rec.Error.AtIndex == i):
					if err == nil || rec.Error == nil || rec.Error.AtIndex != i {
						diff = fmt.Sprintf("error at call %d differs", i)
					}
					i = rec.Length
				case s.Scale() != rec.ScaleAfter[i]:
					diff = fmt.Sprintf("call %d: scale %v here, %v in old DeepSpeed (growth one call earlier there)",
						i, s.Scale(), rec.ScaleAfter[i])
				}
			}
			if diff == "" {
				same++
				diff = "identical"
			}
			t.Logf("%-36s %s", rec.Name, diff)
		}
		t.Logf("loss_scaler.jsonl: %d/%d records identical to the new behaviour", same, len(recs))
	})
	t.Run("lr_schedules", func(t *testing.T) {
		recs := shareddata.ReadGolden[lrGolden](t, "lr_schedules.jsonl")
		same := 0
		for _, rec := range recs {
			var opts []ScheduleOption
			if !rec.Optimizer.HasBetas {
				opts = append(opts, WithoutBetas())
			}
			diff := ""
			s, err := NewSchedule(rec.Scheduler, rec.Params, rec.Optimizer.InitialLR, opts...)
			switch {
			case err != nil:
				diff = fmt.Sprintf("rejected here (%v); old DeepSpeed error: %v", err, rec.Error)
			case rec.LRAfterInit == nil:
				diff = "old DeepSpeed failed in the constructor"
			default:
				if _, e := compareGroups("after init", s.LR(), rec.LRAfterInit); e != nil {
					diff = e.Error()
				}
				for k := 0; k < len(rec.LR) && diff == ""; k++ {
					s.Step()
					if _, e := compareGroups(fmt.Sprintf("after step %d", k+1), s.LR(), rec.LR[k]); e != nil {
						diff = e.Error()
					}
				}
				if diff == "" && rec.Error != nil {
					diff = fmt.Sprintf("old DeepSpeed raised %s at step %d", rec.Error.Type, rec.Error.AtStep)
				}
			}
			if diff == "" {
				same++
				diff = "identical"
			}
			t.Logf("%-40s %-15s %s", rec.Name, rec.Scheduler, diff)
		}
		t.Logf("lr_schedules.jsonl: %d/%d records identical to the new behaviour", same, len(recs))
	})
}
