package optim

import (
	"fmt"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/assert"
)

// The older golden files (loss_scaler.jsonl, lr_schedules.jsonl) record what
// microsoft/DeepSpeed 2025-02 did; deepgo follows deepspeedai 0.19.x, whose
// *.deepspeedai.jsonl twins hold the same case names. TestGoldenLegacyDifferences
// runs every old record's inputs through deepgo and asserts where deepgo
// first departs from the old output:
//
//   - a record listed below must depart exactly as listed (or not at all,
//     listed as identical);
//   - every record must depart at the same point as its deepspeedai twin
//     departs from it, so each difference is one DeepSpeed itself made
//     between the versions. A record missing from the lists (a larger
//     golden set through DEEPGO_GOLDEN) is held to this rule alone.
//
// Anything else is an unknown difference and fails.

// legacyDiff is where one run first departs from an old record: At names
// the call or step ("" when the run is identical), Detail the values.
type legacyDiff struct{ At, Detail string }

func (d legacyDiff) String() string {
	if d.At == "" {
		return "identical"
	}
	return d.At + ": " + d.Detail
}

// knownDiff is a listed record's expected departure and why it happens.
type knownDiff struct {
	legacyDiff
	Why string
}

// growthLater is deepspeedai/DeepSpeed#6976 (2025-06): the scaler grows
// when stable = cur_iter - last_overflow_iter - 1 is a positive multiple of
// the window, one call later than the old (cur_iter - last_overflow_iter) %
// scale_window == 0.
const growthLater = "growth one call later since deepspeedai#6976"

// legacyScaler lists every record of the shared loss_scaler.jsonl.
var legacyScaler = map[string]knownDiff{
	"clean_3000_default_window":         {legacyDiff{"call 999", "scale 65536 here, 131072 old"}, growthLater},
	"first_3_overflows_hys2":            {legacyDiff{"call 102", "scale 1.073741824e+09 here, 2.147483648e+09 old"}, growthLater},
	"periodic_every_7_hys2":             {legacyDiff{"call 5", "scale 65536 here, 131072 old"}, growthLater},
	"periodic_every_7_hys2_consecutive": {legacyDiff{"call 5", "scale 65536 here, 131072 old"}, growthLater},
	"bernoulli_p05_400_hys4":            {legacyDiff{"call 6", "scale 1.6777216e+07 here, 3.3554432e+07 old"}, growthLater},
	"bursts_hys2_window50_consecutive":  {legacyDiff{"call 84", "scale 8192 here, 16384 old"}, growthLater},
	"all_overflow_hits_min_raises":      {Why: "no clean run reaches a window"},
	"fractional_min_scale_0p25":         {Why: "no clean run reaches a window"},
}

// legacyLR lists every record of the shared lr_schedules.jsonl.
var legacyLR = map[string]knownDiff{
	"warmup_two_groups_list_params":       {Why: "WarmupLR with explicit max: unchanged"},
	"decay_log_total200":                  {Why: "WarmupDecayLR: unchanged"},
	"decay_gdgpt_total_minus1_max_minus1": {Why: "WarmupDecayLR: unchanged"},
	"cosine_two_groups": {legacyDiff{"after init group 1", "lr 0 here, 0.002 old"},
		"WarmupCosineLR now zeroes every group at construction; it zeroed only the first"},
	"cosine_matsuolab_config": {Why: "WarmupCosineLR single group, steps end at total: unchanged"},
	"onecycle_lr_and_mom_decay": {legacyDiff{"after step 1 group 0", "lr 0.004 here, 0.00418333 old"},
		"OneCycle stair counts (cycle_first_stair_count) now hold the lr; they were ignored"},
	"onecycle_sgd_no_betas_momentum_disabled": {Why: "OneCycle without stair counts: unchanged"},
	"warmup_max_lr_omitted": {legacyDiff{"after step 2 group 0", "lr 1.2e-05 here, 4e-05 old"},
		"WarmupLR.warmup_max_lr now defaults to the optimizer's lr (0.0003); it was 0.001"},
	"lrrt_continuous": {Why: "LRRangeTest: unchanged"},
}

func TestGoldenLegacyDifferences(t *testing.T) {
	t.Run("loss_scaler", func(t *testing.T) {
		checkLegacy(t, "loss_scaler", legacyScaler, func(r scalerGolden) string { return r.Name },
			func(rec, twin scalerGolden) (legacyDiff, legacyDiff, error) {
				here, err := deepgoScalerRun(rec)
				old := goldenScalerRun(rec)
				return firstScalerDiff(here, old), firstScalerDiff(goldenScalerRun(twin), old), err
			})
	})
	t.Run("lr_schedules", func(t *testing.T) {
		checkLegacy(t, "lr_schedules", legacyLR, func(r lrGolden) string { return r.Name },
			func(rec, twin lrGolden) (legacyDiff, legacyDiff, error) {
				old := goldenLRRun(rec)
				return firstLRDiff(deepgoLRRun(rec), old), firstLRDiff(goldenLRRun(twin), old), nil
			})
	})
}

// checkLegacy applies the rules above to every record of base.jsonl, with
// its twin from base.deepspeedai.jsonl: diff returns where deepgo and the
// twin first depart from the old record.
func checkLegacy[T any](t *testing.T, base string, known map[string]knownDiff, name func(T) string,
	diff func(old, twin T) (here, twinDiff legacyDiff, err error)) {
	t.Helper()
	file := base + ".jsonl"
	recs := shareddata.ReadGolden[T](t, file)
	twins := map[string]T{}
	for _, r := range shareddata.ReadGolden[T](t, base+".deepspeedai.jsonl") {
		twins[name(r)] = r
	}
	seen := map[string]bool{}
	same := 0
	for _, rec := range recs {
		n := name(rec)
		seen[n] = true
		tw, ok := twins[n]
		if !assert.True(t, ok, "%s: no record of that name in %s.deepspeedai.jsonl", n, base) {
			continue
		}
		here, twin, err := diff(rec, tw)
		if !assert.NoError(t, err, n) {
			continue
		}
		if here.At == "" {
			same++
		}
		assert.Equal(t, twin.At, here.At, "%s: deepgo departs from old DeepSpeed at %q (%s), deepspeedai at %q (%s): an unknown difference",
			n, here.At, here, twin.At, twin)
		k, listed := known[n]
		if !listed {
			t.Logf("%-40s %s (not listed; deepspeedai departs at the same point)", n, here)
		} else if assert.Equal(t, k.legacyDiff, here, "%s: deepgo vs old DeepSpeed: %s; listed: %s (%s)", n, here, k.legacyDiff, k.Why) {
			t.Logf("%-40s %s (%s)", n, here, k.Why)
		}
	}
	for n := range known {
		assert.True(t, seen[n], "listed record %q is not in %s", n, file)
	}
	t.Logf("checked %d golden records of %s: %d identical to deepgo, %d listed", len(recs), file, same, len(known))
}

// scalerRun is what a loss scaler did with a record's overflow sequence.
type scalerRun struct {
	scale   []float64
	hyst    []int
	errorAt int // the call that raised; -1 if none
}

func goldenScalerRun(rec scalerGolden) scalerRun {
	r := scalerRun{scale: rec.ScaleAfter, hyst: rec.HysteresisAfter, errorAt: -1}
	if rec.Error != nil {
		r.errorAt = rec.Error.AtIndex
	}
	return r
}

// deepgoScalerRun replays the record on the ZeRO scaler: the old file is
// DeepSpeed's DynamicLossScaler, the one ZeRO uses.
func deepgoScalerRun(rec scalerGolden) (scalerRun, error) {
	p := rec.Params
	s, err := NewDynamicScaler(DynamicScalerConfig{InitScale: p.InitScale, ScaleFactor: p.ScaleFactor,
		ScaleWindow: p.ScaleWindow, MinScale: p.MinScale, DelayedShift: p.DelayedShift,
		ConsecutiveHysteresis: p.ConsecutiveHysteresis, RaiseErrorAtMin: p.RaiseErrorAtMinScale, Mode: ScalerModeZeRO})
	if err != nil {
		return scalerRun{}, err
	}
	r := scalerRun{errorAt: -1}
	for i := range rec.Length {
		if s.Update(rec.Overflow[i] == '1') != nil {
			r.errorAt = i
			break
		}
		r.scale = append(r.scale, s.Scale())
		r.hyst = append(r.hyst, s.Hysteresis())
	}
	return r, nil
}

func firstScalerDiff(got, old scalerRun) legacyDiff {
	for i := 0; i < min(len(got.scale), len(old.scale)); i++ {
		switch {
		case got.scale[i] != old.scale[i]:
			return legacyDiff{fmt.Sprintf("call %d", i), fmt.Sprintf("scale %g here, %g old", got.scale[i], old.scale[i])}
		case i < len(old.hyst) && got.hyst[i] != old.hyst[i]:
			return legacyDiff{fmt.Sprintf("call %d", i), fmt.Sprintf("hysteresis %d here, %d old", got.hyst[i], old.hyst[i])}
		}
	}
	if got.errorAt != old.errorAt || len(got.scale) != len(old.scale) {
		i := min(len(got.scale), len(old.scale))
		return legacyDiff{fmt.Sprintf("call %d", i), fmt.Sprintf("raises at call %d here, %d old (-1: never)", got.errorAt, old.errorAt)}
	}
	return legacyDiff{}
}

// lrRun is what a schedule did with a record's inputs: the per-group lr
// after construction and after each step.
type lrRun struct {
	rejected    bool // the constructor raised
	lr          [][]lrValue
	raisedAfter int // steps completed before a step raised; -1 if none
}

func goldenLRRun(rec lrGolden) lrRun {
	r := lrRun{raisedAfter: -1}
	if rec.Error != nil && rec.Error.AtStep < 0 {
		r.rejected = true
		return r
	}
	if rec.Error != nil {
		r.raisedAfter = rec.Error.AtStep
	}
	r.lr = append([][]lrValue{rec.LRAfterInit}, rec.LR...)
	return r
}

// deepgoLRRun builds the record's schedule and steps it as many times as
// the record asked DeepSpeed to.
func deepgoLRRun(rec lrGolden) lrRun {
	var opts []ScheduleOption
	if !rec.Optimizer.HasBetas {
		opts = append(opts, WithoutBetas())
	}
	s, err := NewSchedule(rec.Scheduler, rec.Params, rec.Optimizer.InitialLR, opts...)
	if err != nil {
		return lrRun{rejected: true, raisedAfter: -1}
	}
	r := lrRun{raisedAfter: -1}
	for k := 0; k <= rec.Steps; k++ {
		if k > 0 {
			s.Step()
		}
		var v []lrValue
		for _, x := range s.LR() {
			v = append(v, lrValue{V: x})
		}
		r.lr = append(r.lr, v)
	}
	return r
}

func firstLRDiff(got, old lrRun) legacyDiff {
	if got.rejected || old.rejected {
		if got.rejected == old.rejected {
			return legacyDiff{}
		}
		return legacyDiff{"construction", fmt.Sprintf("rejected %v here, %v old", got.rejected, old.rejected)}
	}
	for k := 0; k < min(len(got.lr), len(old.lr)); k++ {
		label := "after init"
		if k > 0 {
			label = fmt.Sprintf("after step %d", k)
		}
		if len(got.lr[k]) != len(old.lr[k]) {
			return legacyDiff{label, fmt.Sprintf("%d groups here, %d old", len(got.lr[k]), len(old.lr[k]))}
		}
		for i := range got.lr[k] {
			if !sameLR(got.lr[k][i], old.lr[k][i]) {
				return legacyDiff{fmt.Sprintf("%s group %d", label, i), fmt.Sprintf("lr %v here, %v old", got.lr[k][i], old.lr[k][i])}
			}
		}
	}
	if got.raisedAfter != old.raisedAfter || len(got.lr) != len(old.lr) {
		k := min(len(got.lr), len(old.lr))
		return legacyDiff{fmt.Sprintf("step %d", k), fmt.Sprintf("%d steps ran here, %d old; raised after %d here, %d old (-1: never)",
			len(got.lr)-1, len(old.lr)-1, got.raisedAfter, old.raisedAfter)}
	}
	return legacyDiff{}
}
