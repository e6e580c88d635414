package deepgo_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oneCycleParams is a OneCycle over the runs' 20 steps: a 10-step cycle
// (LR up for 4, down for 6; momentum the other way between 0.8 and 0.95),
// then decay of both every 2 steps (momentum up to 0.974 by step 19).
func oneCycleParams(momentum bool) string {
	return fmt.Sprintf(`{"cycle_min_lr": 0.001, "cycle_max_lr": 0.004, "cycle_first_step_size": 4, "cycle_second_step_size": 6,
		"decay_step_size": 2, "decay_lr_rate": 0.1, "cycle_min_mom": 0.8, "cycle_max_mom": 0.95, "decay_mom_rate": 0.005,
		"cycle_momentum": %v}`, momentum)
}

// oneCycleExtra is the run.extra member that adds the schedule.
func oneCycleExtra(momentum bool) string {
	return `, "scheduler": {"type": "OneCycle", "params": ` + oneCycleParams(momentum) + `}`
}

// oneCycleSchedule is the schedule of oneCycleParams for the runs' base LR.
func oneCycleSchedule(t *testing.T, momentum bool) optim.Schedule {
	t.Helper()
	var p map[string]any
	require.NoError(t, json.Unmarshal([]byte(oneCycleParams(momentum)), &p))
	s, err := optim.NewSchedule(optim.ScheduleOneCycle, p, []float64{0.002})
	require.NoError(t, err)
	return s
}

// plainOneCycle is plainTrain under the schedule: optimizer step k runs
// with the LR and (with cycle_momentum) the betas at t = k-1+lag, as
// DeepSpeed's OneCycle writes them (at construction for k = 0, then at each
// scheduler.step()); lag 0 is DeepSpeed's, lag 1 a step late.
func plainOneCycle(t *testing.T, momentum bool, lag int) *result {
	t.Helper()
	s := oneCycleSchedule(t, momentum)
	res, err := plainTrainWith(steps, 1.0, func(k int, opt *testmodel.AdamW) {
		opt.LR = s.LRAt(k - 1)[0]
		if b, ok := s.BetasAt(k - 1 + lag); ok {
			opt.Beta1, opt.Beta2 = b[0][0], b[0][1]
		}
	})
	require.NoError(t, err)
	return res
}

// OneCycle with cycle_momentum (DeepSpeed's default) drives AdamW's betas:
// each step runs with BetasAt(t)'s (beta1, 0.99), its bias correction with
// that beta1, so every ZeRO stage matches plainTrain stepping with exactly
// those betas (and the OneCycle LRs) to the equivalence tolerances, and
// differs from the same run with cycle_momentum false, which matches
// plainTrain with the optimizer's own betas. Applying the betas a step late
// misses by far more than the tolerance, so the comparison sees the timing.
func TestOneCycleMomentum(t *testing.T) {
	on, off := plainOneCycle(t, true, 0), plainOneCycle(t, false, 0)
	late := plainOneCycle(t, true, 1)
	lateD, _ := relDiff(on.params, late.params)
	require.Greater(t, lateD, 100*plainParamTol, "betas a step late should be told apart")
	offD, _ := relDiff(on.params, off.params)
	require.Greater(t, offD, 100*plainParamTol, "cycle_momentum should change the parameters")
	t.Logf("plain with cycle_momentum against betas a step late: %.2e, against cycle_momentum false: %.2e", lateD, offD)

	for _, r := range []run{
		{stage: 0, world: 1, gas: 1},
		{stage: 1, world: 2, gas: 2},
		{stage: 2, world: 2, gas: 1, zeroExtra: `, "sub_group_size": 100`},
		{stage: 3, world: 2, gas: 2},
		// the simulated device: the betas reach its optimizer kernels too
		{stage: 2, world: 2, gas: 1, dev: "sim"},
	} {
		for _, momentum := range []bool{true, false} {
			r := r
			r.extra = oneCycleExtra(momentum)
			t.Run(fmt.Sprintf("%v/cycle_momentum=%v", r, momentum), func(t *testing.T) {
				got, err := train(t, r)
				require.NoError(t, err)
				want, other := on, off
				if !momentum {
					want, other = off, on
				}
				ld, pd := compareRuns(t, "vs plain", want, got, plainLossTol, plainParamTol)
				t.Logf("against plain: losses %.2e, parameters %.2e", ld, pd)
				pd, _ = relDiff(other.params, got.params)
				assert.Greater(t, pd, 100*plainParamTol, "the run with cycle_momentum=%v", !momentum)
				assert.NotEqual(t, other.losses[steps-1], got.losses[steps-1], "the last loss of the run with cycle_momentum=%v", !momentum)
			})
		}
	}
}

// A OneCycle run with cycle_momentum saved part way and resumed by fresh
// engines trains on bit-identically to an uninterrupted run: the betas are
// a function of the restored last_batch_iteration.
func TestOneCycleMomentumResume(t *testing.T) {
	r := run{stage: 2, world: 2, gas: 1, steps: ckptSteps, extra: oneCycleExtra(true)}
	ref, err := train(t, r)
	require.NoError(t, err)
	dir := t.TempDir()
	_, _, err = segment{r: r, save: dir, from: 0, to: ckptAt}.train(t)
	require.NoError(t, err)
	got, _, err := segment{r: r, load: dir, from: ckptAt, to: ckptSteps}.train(t)
	require.NoError(t, err)
	require.NoError(t, bitEqual(ref.params, got))
}

// SGD has no betas: DeepSpeed's OneCycle disables momentum cycling for it
// (and warns), so cycle_momentum true trains bit-identically to false, and
// an SGD optimizer passed with WithOptimizer (the config cannot tell)
// gets the warning as a note.
func TestOneCycleMomentumSGD(t *testing.T) {
	cpu, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer cpu.Close()
	results := map[bool]*result{}
	for _, momentum := range []bool{true, false} {
		sgd, err := optim.New("SGD", map[string]any{"lr": 0.002, "momentum": 0.9}, cpu)
		require.NoError(t, err)
		defer sgd.Close()
		r := run{stage: 1, world: 1, gas: 1, steps: 6, extra: oneCycleExtra(momentum), opts: []deepgo.Option{deepgo.WithOptimizer(sgd)}}
		res, err := train(t, r)
		require.NoError(t, err, "cycle_momentum=%v", momentum)
		results[momentum] = res
		notes := strings.Join(res.engines[0].Notes(), "\n")
		if momentum {
			assert.Contains(t, notes, "scheduler.params.cycle_momentum: momentum cycling is disabled because the optimizer has no betas")
		} else {
			assert.NotContains(t, notes, "cycle_momentum")
		}
	}
	require.NoError(t, bitEqual(results[false].params, results[true].params))
}

// The pipeline engine applies OneCycle's momentum as the data-parallel
// Engine does: 2 stages train a GPT to the Engine's losses and parameters
// to pipeTol, which differ from those with cycle_momentum false by far
// more, and a run saved after 2 steps resumes bit-identically.
func TestPipelineOneCycleMomentum(t *testing.T) {
	// The pipeline and the Engine sum in different orders: over these 6
	// steps their parameters differ by 1e-5 to 3e-5 relative (at
	// c_attn.bias, the same under WarmupLR and with cycle_momentum false),
	// while a pipeline that ignores the momentum is 0.36 away.
	const pipeTol = 1e-4
	sched := func(momentum bool) string {
		return `{"type": "OneCycle", "params": ` + oneCycleParams(momentum) + `}`
	}
	runs := map[string]*pipeCkptRun{}
	for _, c := range []struct {
		name     string
		pp       int
		momentum bool
	}{{"engine", 1, true}, {"pipe", 2, true}, {"pipe off", 2, false}} {
		r := &pipeCkptRun{pp: c.pp, dp: 1, zero: 1, scheduler: sched(c.momentum), from: 0, to: 6}
		require.NoError(t, r.run(t), c.name)
		runs[c.name] = r
	}
	last := len(runs["pipe"].losses) - 1 // the last stage's losses
	ld := lossDiff(runs["engine"].losses[0], runs["pipe"].losses[last])
	pd, where := relDiff(runs["engine"].params, runs["pipe"].params)
	offD, _ := relDiff(runs["pipe off"].params, runs["pipe"].params)
	t.Logf("pipe against engine: losses %.2e, parameters %.2e; against cycle_momentum false: parameters %.2e", ld, pd, offD)
	assert.LessOrEqual(t, ld, pipeTol, "losses: engine %v, pipe %v", runs["engine"].losses[0], runs["pipe"].losses[last])
	assert.LessOrEqual(t, pd, pipeTol, "parameters at %s", where)
	assert.Greater(t, offD, 100*pipeTol, "cycle_momentum false against true")

	dir := t.TempDir()
	ref := &pipeCkptRun{pp: 2, dp: 1, zero: 1, scheduler: sched(true), save: dir, from: 0, to: 4}
	require.NoError(t, ref.run(t))
	res := &pipeCkptRun{pp: 2, dp: 1, zero: 1, scheduler: sched(true), load: dir, from: 2, to: 4}
	require.NoError(t, res.run(t))
	require.NoError(t, bitEqual(ref.params, res.params), "parameters after the resumed steps")
}

// A momentum decay that takes beta1 to 1 or past it fails the step that
// would use it with an error naming the schedule's keys and t, instead of
// a run that diverges.
func TestOneCycleMomentumOutOfRange(t *testing.T) {
	r := run{stage: 1, world: 1, gas: 1, steps: 12, extra: `, "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.004,
		"cycle_first_step_size": 4, "cycle_second_step_size": 6, "decay_step_size": 1, "cycle_max_mom": 0.95, "decay_mom_rate": 0.5}}`}
	_, err := train(t, r)
	require.Error(t, err)
	assert.ErrorContains(t, err, "scheduler.type OneCycle: betas[0] 1.425 at last_batch_iteration 10: must be in [0, 1)")
	assert.ErrorContains(t, err, "decay_mom_rate")
}

// An fp16 step skipped for overflow leaves OneCycle where it was, as in
// DeepSpeed (its engine steps the scheduler only after an applied update):
// the LR (and so the betas, read from the same last_batch_iteration) after
// each step is the schedule's at the count of applied steps, on the ZeRO
// stages and the simulated device alike.
func TestOneCycleOverflowHoldsSchedule(t *testing.T) {
	overflowAt := map[int]bool{3: true, 4: true, 9: true}
	const n = 12
	for _, r := range []run{
		{stage: 1, world: 2, gas: 1},
		{stage: 3, world: 2, gas: 2},
		{stage: 2, world: 2, gas: 1, dev: "sim"},
	} {
		r.precision, r.steps, r.extra = "fp16", n, oneCycleExtra(true)
		t.Run(fmt.Sprint(r), func(t *testing.T) {
			var lrs []float64 // rank 0's LR() after each step
			var applied []bool
			r.hook = func(rank int, m *testmodel.MLP, e *deepgo.Engine, step int) {
				if rank == 1 {
					m.Layers[1].InjectInf = func() bool { return overflowAt[step] }
				}
				if rank == 0 && step > 0 {
					lrs, applied = append(lrs, e.LR()), append(applied, e.WasStepApplied())
				}
			}
			res, err := train(t, r)
			require.NoError(t, err)
			require.Equal(t, len(overflowAt), res.skipped)
			s := oneCycleSchedule(t, true)
			done := 0
			for step, lr := range lrs {
				require.Equal(t, !overflowAt[step], applied[step], "step %d applied", step)
				if applied[step] {
					done++
				}
				// the first step ran at t = -1 (OneCycle at construction)
				assert.Equal(t, s.LRAt(done - 1)[0], lr, "LR after step %d (%d applied)", step, done)
			}
		})
	}
}
