package optim

import (
	"fmt"
	"math"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
)

type lrGolden struct {
	Name      string         `json:"name"`
	Scheduler string         `json:"scheduler"`
	Params    map[string]any `json:"params"`
	Optimizer struct {
		Type      string    `json:"type"`
		InitialLR []float64 `json:"initial_lr"`
		HasBetas  bool      `json:"has_betas"`
	} `json:"optimizer"`
	LRAfterInit    []float64       `json:"lr_after_init"`
	Steps          int             `json:"steps"`
	LR             [][]float64     `json:"lr"`
	CycleMomentum  *bool           `json:"cycle_momentum"`
	BetasAfterInit []*[2]float64   `json:"betas_after_init"`
	Betas          [][]*[2]float64 `json:"betas"`
	Error          *struct {
		AtStep  int    `json:"at_step"`
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// lrRelTol is the relative tolerance for learning rates: Go's math.Log and
// math.Cos may differ from glibc's by an ulp.
const lrRelTol = 1e-12

func closeRel(got, want float64) bool {
	if got == want {
		return true
	}
	return math.Abs(got-want) <= lrRelTol*math.Max(math.Abs(got), math.Abs(want))
}

func compareGroups(label string, got, want []float64) (float64, error) {
	if len(got) != len(want) {
		return 0, fmt.Errorf("%s: %d groups, want %d", label, len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		if !closeRel(got[i], want[i]) {
			return 0, fmt.Errorf("%s group %d: lr %.17g, want %.17g", label, i, got[i], want[i])
		}
		if got[i] != want[i] {
			worst = math.Max(worst, math.Abs(got[i]-want[i])/math.Max(math.Abs(got[i]), math.Abs(want[i])))
		}
	}
	return worst, nil
}

// compareBetas checks Betas against a golden entry. When the schedule does
// not drive betas, the golden must show the optimizer's own (torch Adam
// defaults) or none at all.
func compareBetas(label string, got [][2]float64, ok bool, want []*[2]float64) error {
	if len(want) == 0 {
		if ok {
			return fmt.Errorf("%s: schedule drives betas, golden has none", label)
		}
		return nil
	}
	for i, w := range want {
		if !ok {
			if w != nil && *w != [2]float64{0.9, 0.999} {
				return fmt.Errorf("%s group %d: schedule leaves betas alone, golden has %v", label, i, *w)
			}
			continue
		}
		if w == nil {
			return fmt.Errorf("%s group %d: golden has no betas, schedule gives %v", label, i, got[i])
		}
		if !closeRel(got[i][0], w[0]) || got[i][1] != w[1] {
			return fmt.Errorf("%s group %d: betas %v, want %v", label, i, got[i], *w)
		}
	}
	return nil
}

func TestScheduleGolden(t *testing.T) {
	const file = "lr_schedules.deepspeedai.jsonl"
	recs := shareddata.ReadGolden[lrGolden](t, file)
	matched, values := 0, 0
	t.Logf("%-42s %-15s %6s %6s %9s %s", "case ("+file+")", "type", "groups", "steps", "max rel", "result")
	for _, rec := range recs {
		worst := 0.0
		n := 0
		ok := t.Run(rec.Name, func(t *testing.T) {
			var opts []ScheduleOption
			if !rec.Optimizer.HasBetas {
				opts = append(opts, WithoutBetas())
			}
			s, err := NewSchedule(rec.Scheduler, rec.Params, rec.Optimizer.InitialLR, opts...)
			if rec.Error != nil && rec.Error.AtStep == -1 {
				if err == nil {
					t.Fatalf("NewSchedule succeeded, DeepSpeed raised %s: %s", rec.Error.Type, rec.Error.Message)
				}
				t.Logf("rejected as DeepSpeed does: %v", err)
				return
			}
			if err != nil {
				if rec.Error != nil {
					// DeepSpeed fails later, at a step(); we reject up front.
					t.Logf("rejected at construction; DeepSpeed raised %s at step %d: %v", rec.Error.Type, rec.Error.AtStep, err)
					return
				}
				t.Fatalf("NewSchedule: %v", err)
			}
			if s.LastBatchIteration() != -1 {
				t.Fatalf("LastBatchIteration = %d, want -1", s.LastBatchIteration())
			}
			w, err := compareGroups("after init", s.LR(), rec.LRAfterInit)
			if err != nil {
				t.Fatal(err)
			}
			worst = math.Max(worst, w)
			b, bok := s.Betas()
			if err := compareBetas("after init", b, bok, rec.BetasAfterInit); err != nil {
				t.Fatal(err)
			}
			if rec.CycleMomentum != nil && *rec.CycleMomentum != bok {
				t.Fatalf("momentum cycling %v, DeepSpeed %v", bok, *rec.CycleMomentum)
			}
			for k, want := range rec.LR {
				s.Step()
				label := fmt.Sprintf("after step %d", k+1)
				w, err := compareGroups(label, s.LR(), want)
				if err != nil {
					t.Fatal(err)
				}
				worst = math.Max(worst, w)
				if k < len(rec.Betas) {
					b, bok := s.Betas()
					if err := compareBetas(label, b, bok, rec.Betas[k]); err != nil {
						t.Fatal(err)
					}
				}
				n++
			}
			if rec.Error != nil {
				t.Fatalf("DeepSpeed raised %s after %d steps; nothing failed here", rec.Error.Type, rec.Error.AtStep)
			}
			if len(rec.LR) != rec.Steps {
				t.Fatalf("golden has %d lr entries for %d steps", len(rec.LR), rec.Steps)
			}
		})
		result := "MISMATCH"
		if ok {
			matched++
			values += n + 1
			result = "ok"
		}
		groups := len(rec.Optimizer.InitialLR)
		t.Logf("%-42s %-15s %6d %6d %9.1e %s", rec.Name, rec.Scheduler, groups, len(rec.LR), worst, result)
	}
	t.Logf("%s: %d/%d records matched (LR within %.0e relative; %d per-step LR vectors compared)",
		file, matched, len(recs), lrRelTol, values)
	shareddata.Checked(t, file, len(recs), len(recs))
}
