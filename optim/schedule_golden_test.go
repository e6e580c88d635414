package optim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/require"
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
	LRAfterInit    []lrValue     `json:"lr_after_init"`
	Steps          int           `json:"steps"`
	LR             [][]lrValue   `json:"lr"`
	CycleMomentum  *bool         `json:"cycle_momentum"`
	BetasAfterInit []*betaPair   `json:"betas_after_init"`
	Betas          [][]*betaPair `json:"betas"`
	Error          *struct {
		AtStep  int    `json:"at_step"`
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// lrValue is one param group's lr in a golden record: a number, except
// where old DeepSpeed stored a whole per-group list as the lr (OneCycle
// given lists for cycle_min_lr/cycle_max_lr, which then failed at the first
// step); List holds that list.
type lrValue struct {
	V    float64
	List []float64
}

func (v *lrValue) UnmarshalJSON(b []byte) error {
	if b = bytes.TrimSpace(b); len(b) > 0 && b[0] == '[' {
		v.List = []float64{}
		return json.Unmarshal(b, &v.List)
	}
	return json.Unmarshal(b, &v.V)
}

func (v lrValue) String() string {
	if v.List != nil {
		return fmt.Sprintf("%g (a list)", v.List)
	}
	return fmt.Sprintf("%.6g", v.V)
}

// sameLR reports whether two golden lr values agree within lrRelTol.
func sameLR(a, b lrValue) bool {
	if (a.List == nil) != (b.List == nil) || len(a.List) != len(b.List) {
		return false
	}
	for i := range a.List {
		if !closeRel(a.List[i], b.List[i]) {
			return false
		}
	}
	return a.List != nil || closeRel(a.V, b.V)
}

// betaPair is one param group's [beta1, beta2] in a golden record. Raw
// keeps an entry that is not two numbers (old DeepSpeed's OneCycle stored
// per-group momentum lists as beta1) so that such a record still decodes.
type betaPair struct {
	B   [2]float64
	Raw string
}

func (p *betaPair) UnmarshalJSON(b []byte) error {
	if json.Unmarshal(b, &p.B) != nil {
		p.Raw = string(b)
	}
	return nil
}

func (p betaPair) String() string {
	if p.Raw != "" {
		return p.Raw
	}
	return fmt.Sprint(p.B)
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

func compareGroups(label string, got []float64, want []lrValue) (float64, error) {
	if len(got) != len(want) {
		return 0, fmt.Errorf("%s: %d groups, want %d", label, len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		w := want[i].V
		if want[i].List != nil {
			return 0, fmt.Errorf("%s group %d: lr %.17g, golden holds a list %v", label, i, got[i], want[i].List)
		}
		if !closeRel(got[i], w) {
			return 0, fmt.Errorf("%s group %d: lr %.17g, want %.17g", label, i, got[i], w)
		}
		if got[i] != w {
			worst = math.Max(worst, math.Abs(got[i]-w)/math.Max(math.Abs(got[i]), math.Abs(w)))
		}
	}
	return worst, nil
}

// compareBetas checks Betas against a golden entry. When the schedule does
// not drive betas, the golden must show the optimizer's own (torch Adam
// defaults) or none at all.
func compareBetas(label string, got [][2]float64, ok bool, want []*betaPair) error {
	if len(want) == 0 {
		if ok {
			return fmt.Errorf("%s: schedule drives betas, golden has none", label)
		}
		return nil
	}
	for i, w := range want {
		if w != nil && w.Raw != "" {
			return fmt.Errorf("%s group %d: golden betas %s are not two numbers", label, i, w.Raw)
		}
		if !ok {
			if w != nil && w.B != [2]float64{0.9, 0.999} {
				return fmt.Errorf("%s group %d: schedule leaves betas alone, golden has %v", label, i, w)
			}
			continue
		}
		if len(got) != len(want) {
			return fmt.Errorf("%s: betas for %d groups, golden has %d", label, len(got), len(want))
		}
		if w == nil {
			return fmt.Errorf("%s group %d: golden has no betas, schedule gives %v", label, i, got[i])
		}
		if !closeRel(got[i][0], w.B[0]) || got[i][1] != w.B[1] {
			return fmt.Errorf("%s group %d: betas %v, want %v", label, i, got[i], w)
		}
	}
	return nil
}

// knownEarlyRejections lists golden records whose config deepgo rejects at
// construction although DeepSpeed built the schedule and ran steps (before
// raising, or to the end), each with the documented reason. Any other rejection of
// a config DeepSpeed ran is a failure. (None in the shared golden subset.)
var knownEarlyRejections = map[string]string{}

// goldenBetas returns the golden betas after step k (0 = after init), nil
// where the record has none. DeepSpeed's records carry betas for OneCycle
// only, and then one entry per step: a record that has some must have all.
func goldenBetas(rec lrGolden, k int) ([]*betaPair, error) {
	has := rec.BetasAfterInit != nil || rec.Betas != nil
	switch {
	case rec.Scheduler == "OneCycle" && !has:
		return nil, fmt.Errorf("golden OneCycle record has no betas")
	case !has:
		return nil, nil
	case rec.BetasAfterInit == nil || len(rec.Betas) != len(rec.LR):
		return nil, fmt.Errorf("golden record has betas after init: %v, and %d betas entries for %d lr entries",
			rec.BetasAfterInit != nil, len(rec.Betas), len(rec.LR))
	case k == 0:
		return rec.BetasAfterInit, nil
	}
	return rec.Betas[k-1], nil
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
				require.Error(t, err, "NewSchedule succeeded, DeepSpeed raised %s: %s", rec.Error.Type, rec.Error.Message)
				t.Logf("rejected as DeepSpeed does: %v", err)
				return
			}
			why, listed := knownEarlyRejections[rec.Name]
			ran := fmt.Sprintf("DeepSpeed ran all %d steps", rec.Steps)
			if rec.Error != nil {
				ran = fmt.Sprintf("DeepSpeed ran %d steps before raising %s", rec.Error.AtStep, rec.Error.Type)
			}
			switch {
			case err != nil && listed:
				t.Logf("rejected at construction (%s); %s: %v", why, ran, err)
				return
			case err != nil:
				require.NoError(t, err, "NewSchedule: %s (list the record in knownEarlyRejections only for a documented difference)", ran)
			case listed:
				require.Failf(t, "listed but accepted", "listed in knownEarlyRejections (%s), but NewSchedule accepted it", why)
			}
			require.Equal(t, -1, s.LastBatchIteration(), "LastBatchIteration")
			w, err := compareGroups("after init", s.LR(), rec.LRAfterInit)
			require.NoError(t, err)
			worst = math.Max(worst, w)
			wantBetas, err := goldenBetas(rec, 0)
			require.NoError(t, err)
			b, bok := s.Betas()
			require.NoError(t, compareBetas("after init", b, bok, wantBetas))
			if rec.CycleMomentum != nil {
				require.Equal(t, *rec.CycleMomentum, bok, "momentum cycling (expected: DeepSpeed's)")
			}
			for k, want := range rec.LR {
				s.Step()
				label := fmt.Sprintf("after step %d", k+1)
				w, err := compareGroups(label, s.LR(), want)
				require.NoError(t, err)
				worst = math.Max(worst, w)
				wantBetas, err = goldenBetas(rec, k+1)
				require.NoError(t, err)
				b, bok := s.Betas()
				require.NoError(t, compareBetas(label, b, bok, wantBetas))
				n++
			}
			if rec.Error != nil {
				require.Failf(t, "no error", "DeepSpeed raised %s after %d steps; nothing failed here", rec.Error.Type, rec.Error.AtStep)
			}
			require.Len(t, rec.LR, rec.Steps, "golden: lr entries for %d steps", rec.Steps)
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
	t.Logf("checked %d golden records of %s: %d matched (LR within %.0e relative; %d per-step LR and betas vectors compared)",
		len(recs), file, matched, lrRelTol, values)
	shareddata.Checked(t, file, len(recs), len(recs))
}
