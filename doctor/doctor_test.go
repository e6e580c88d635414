package doctor_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/doctor"
	"github.com/deepgo-ml/deepgo/internal/runfixture"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// input writes run as a run directory, reads it back and parses its config,
// as deepgo doctor does.
func input(t *testing.T, run runfixture.Run) doctor.Input {
	t.Helper()
	dir, err := runfixture.Write(t.TempDir(), run)
	require.NoError(t, err)
	r, err := rundir.Read(dir)
	require.NoError(t, err)
	in := doctor.Input{Run: r}
	if r.Info.HasConfig() {
		in.Config, err = config.Parse(r.Info.Config)
		require.NoError(t, err)
	}
	return in
}

func rules(fs []doctor.Finding) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, f.Rule)
	}
	return out
}

func advice(f doctor.Finding, prefix string) (doctor.Advice, bool) {
	for _, a := range f.Advice {
		if strings.HasPrefix(a.Text, prefix) {
			return a, true
		}
	}
	return doctor.Advice{}, false
}

// The must-show: three crafted runs give the expected findings, a
// healthy one none.
func TestCraftedRuns(t *testing.T) {
	cases := []struct {
		name     string
		run      runfixture.Run
		want     []string
		evidence []string // substrings of the finding's evidence
		advice   []string // prefixes of the finding's advice
	}{
		{name: "healthy", run: runfixture.Healthy(), want: []string{}},
		{name: "near out of memory", run: runfixture.NearOOM(), want: []string{"memory"},
			evidence: []string{"peak memory 76.5 GiB (Train/GPU/memory_used_bytes, step 3) = 95.6% of the 80.0 GiB capacity", "target < 90.0%", "free 4.5 GiB per rank"},
			advice:   []string{"zero_optimization.stage 1 -> 2", "zero_optimization.stage 1 -> 3", "zero_optimization.offload_optimizer.device cpu", "activation_checkpointing", "train_micro_batch_size_per_gpu 4 -> 2 with gradient_accumulation_steps 1 -> 2"}},
		{name: "communication-bound", run: runfixture.CommBound(), want: []string{"communication"},
			evidence: []string{"communication 150.0 ms of a 320.0 ms step = 46.9%", "mean of 59 steps from step 2", "target < 25.0%"},
			advice:   []string{"zero_optimization.overlap_comm false -> true", "zero_optimization.reduce_bucket_size 2000000 -> 500000000", "zero_optimization.allgather_bucket_size 2000000 -> 500000000", "gradient_accumulation_steps 1 -> 3 (the guide's remedy; train_batch_size grows 3x): one reduction per 3 micro-batches, projected communication share 22.7%"}},
		{name: "overflow storm", run: runfixture.OverflowStorm(), want: []string{"overflow"},
			evidence: []string{"15 of 59 steps after the calibration skipped for overflow (25.4%), steps 21-39", "longest run 3 steps from step 21", "loss scale 32768 at most, 1 at step 60", "min_loss_scale 1 at step 39"},
			advice:   []string{"bf16.enabled true", "scheduler.params.warmup_num_steps 10 -> 100: the first trouble is at step 21", "lower the peak learning rate 0.0001 -> 5e-05"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := doctor.Diagnose(input(t, c.run))
			require.Equal(t, c.want, rules(rep.Findings), "findings: %+v", rep.Findings)
			assert.Len(t, rep.Checked, len(doctor.Rules), "one checked line per rule")
			if len(c.want) == 0 {
				return
			}
			f := rep.Findings[0]
			ev := strings.Join(f.Evidence, "\n")
			for _, e := range c.evidence {
				assert.Contains(t, ev, e)
			}
			for _, a := range c.advice {
				_, ok := advice(f, a)
				assert.True(t, ok, "advice %q missing from %+v", a, f.Advice)
			}
		})
	}
}

// The memory advice carries the estimator's savings, computed here by hand
// from the ZeRO arithmetic for 6.7e9 fp16 params with Adam over 8 ranks:
// stage 1 keeps 2P params + 2P grads + 12P/8 master and moments = 5.5P,
// stage 2 2P + 14P/8 = 3.75P, stage 3 16P/8 = 2P; DeepSpeed's zero2
// offload estimate frees (2P + 18P/8) - 2P = 2.25P of GPU memory.
func TestMemorySavings(t *testing.T) {
	rep := doctor.Diagnose(input(t, runfixture.NearOOM()))
	require.Len(t, rep.Findings, 1)
	f := rep.Findings[0]
	const P = runfixture.Params
	peak := int64(76.5 * runfixture.GiB)
	act := peak - 55*P/10
	for prefix, want := range map[string]int64{
		"zero_optimization.stage 1 -> 2":                 175 * P / 100,
		"zero_optimization.stage 1 -> 3":                 35 * P / 10,
		"zero_optimization.offload_optimizer.device cpu": 225 * P / 100,
		"activation_checkpointing":                       act,
		"train_micro_batch_size_per_gpu":                 act / 2,
	} {
		a, ok := advice(f, prefix)
		if assert.True(t, ok, "advice %q", prefix) {
			assert.Equal(t, want, a.SavingBytes, "%s: %s", prefix, a.Text)
		}
	}
}

func TestNoConfigStillMeasures(t *testing.T) {
	run := runfixture.NearOOM()
	run.Info.Config = nil
	rep := doctor.Diagnose(input(t, run))
	require.Equal(t, []string{"memory"}, rules(rep.Findings))
	require.Len(t, rep.Findings[0].Advice, 1)
	assert.Contains(t, rep.Findings[0].Advice[0].Text, "no estimates")
	assert.Contains(t, rep.Checked[len(rep.Checked)-1], "bubble: not checked: no config")
}

func TestOffloadNotProposedOnCPU(t *testing.T) {
	run := runfixture.NearOOM()
	run.Info.Device = "cpu"
	rep := doctor.Diagnose(input(t, run))
	require.Len(t, rep.Findings, 1)
	a, ok := advice(rep.Findings[0], "offload_optimizer: not proposed")
	assert.True(t, ok, "%+v", rep.Findings[0].Advice)
	assert.Zero(t, a.SavingBytes)
}

// Without deepgo's comm_time_ms the share comes from wall_clock_breakdown's
// allreduce time over forward + backward + step.
func TestCommFromDeepSpeedTags(t *testing.T) {
	run := runfixture.CommBound()
	delete(run.Values, rundir.TagCommTimeMS)
	delete(run.Values, rundir.TagStepTimeMS)
	rep := doctor.Diagnose(input(t, run))
	require.Equal(t, []string{"communication"}, rules(rep.Findings))
	// 150 of 100 + 200 + 3: the engine's own 17 ms is not in DeepSpeed's three
	assert.Contains(t, rep.Findings[0].Evidence[0], "communication 150.0 ms of a 303.0 ms step = 49.5% (Train/Samples/elapsed_time_ms_backward_allreduce")
}

func cfgJSON(t *testing.T, mutate func(map[string]any)) json.RawMessage {
	t.Helper()
	c := map[string]any{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4, "optimizer": map[string]any{"type": "Adam", "params": map[string]any{"lr": 1e-3}}}
	mutate(c)
	b, err := json.Marshal(c)
	require.NoError(t, err)
	return b
}

// The bubble from the config; a config without gradient_accumulation_steps
// (train_batch_size and the micro-batch) resolves it for the run's world,
// every parallel dimension included, as the engine did.
func TestBubble(t *testing.T) {
	cases := []struct {
		name          string
		pp, gas       int // gas 0: absent
		mb            int // train_micro_batch_size_per_gpu (0: cfgJSON's)
		tbs, world    int // train_batch_size, deepgo_run.json's world (0: absent)
		interleaved   int
		want          bool
		evidence, adv string
	}{
		{name: "resolved for the world", pp: 2, tbs: 16, world: 8, want: true, evidence: "2 micro-batches per step (gradient_accumulation_steps), 1F1B schedule (1 chunks per stage): bubble (p-1)/(v*m+p-1) = 1/3 = 33.3%", adv: "gradient_accumulation_steps 2 -> 6: bubble 14.3%"},
		{name: "world unknown", pp: 2, tbs: 16, want: true, evidence: "= 1/2 = 50.0%", adv: "gradient_accumulation_steps 1 -> 6"},
		{name: "no pipeline", pp: 1, gas: 1},
		{name: "4 stages 4 micro-batches", pp: 4, gas: 4, want: true, evidence: "bubble (p-1)/(v*m+p-1) = 3/7 = 42.9%", adv: "gradient_accumulation_steps 4 -> 18: bubble 14.3%"},
		{name: "4 stages 17 micro-batches: 15.0% is not below 15%", pp: 4, gas: 17, want: true, evidence: "3/20 = 15.0%", adv: "gradient_accumulation_steps 17 -> 18"},
		{name: "4 stages 18 micro-batches", pp: 4, gas: 18},
		{name: "2 stages interleaved: a multiple of 2", pp: 2, gas: 2, interleaved: 2, want: true, evidence: "= 1/5 = 20.0%", adv: "gradient_accumulation_steps 2 -> 4: bubble 11.1%; train_batch_size grows 2x (a rank's 2 samples per step, micro-batch 1 × 2, do not split into 4 micro-batches)"},
		{name: "micro-batch 6 splits into 6", pp: 2, gas: 2, mb: 6, want: true, evidence: "= 1/3 = 33.3%", adv: "gradient_accumulation_steps 2 -> 6 with train_micro_batch_size_per_gpu 6 -> 2 (the same train_batch_size): bubble 14.3%"},
		{name: "micro-batch 8 splits into 8, not 6", pp: 2, gas: 2, mb: 8, want: true, evidence: "= 1/3 = 33.3%", adv: "gradient_accumulation_steps 2 -> 8 with train_micro_batch_size_per_gpu 8 -> 2 (the same train_batch_size): bubble 11.1%"},
		{name: "8 stages 40 micro-batches", pp: 8, gas: 40},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := cfgJSON(t, func(m map[string]any) {
				m["gradient_accumulation_steps"] = c.gas
				if c.gas == 0 {
					delete(m, "gradient_accumulation_steps")
					m["train_micro_batch_size_per_gpu"] = 2
				}
				if c.tbs > 0 {
					m["train_batch_size"] = c.tbs
				}
				if c.mb > 0 {
					m["train_micro_batch_size_per_gpu"] = c.mb
				}
				m["pipeline_model_parallel_size"] = c.pp
				if c.interleaved > 0 {
					m["pipeline_schedule"] = map[string]any{"type": "Interleaved", "virtual_stages": c.interleaved}
				}
			})
			cfg, err := config.Parse(b)
			require.NoError(t, err)
			run := &rundir.Run{}
			if c.world > 0 {
				run.Info = &rundir.Info{World: c.world}
			}
			rep := doctor.Diagnose(doctor.Input{Run: run, Config: cfg})
			if !c.want {
				assert.Empty(t, rep.Findings)
				return
			}
			require.Equal(t, []string{"bubble"}, rules(rep.Findings))
			assert.Contains(t, rep.Findings[0].Evidence[0], c.evidence)
			assert.Equal(t, c.adv, rep.Findings[0].Advice[0].Text[:len(c.adv)])
		})
	}
}

// series builds a run with the given loss (and a constant lr) and no other tag.
func lossRun(loss ...float64) *rundir.Run {
	s := &rundir.Series{Tag: rundir.TagLoss}
	lr := &rundir.Series{Tag: rundir.TagLR}
	for i, v := range loss {
		s.Steps = append(s.Steps, int64(i+1))
		s.Values = append(s.Values, v)
		lr.Steps = append(lr.Steps, int64(i+1))
		lr.Values = append(lr.Values, 3e-4)
	}
	return &rundir.Run{Series: map[string]*rundir.Series{rundir.TagLoss: s, rundir.TagLR: lr}}
}

func TestSpikes(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		name     string
		loss     []float64
		evidence string
	}{
		{name: "falling", loss: []float64{9, 8, 7, 6, 5, 4.5, 4.2, 4, 3.9, 3.8}},
		{name: "too short to judge", loss: []float64{9, 1, 9, 1}},
		{name: "one spike", loss: []float64{5, 4.8, 4.6, 4.5, 4.4, 4.3, 7.5, 4.2, 4.1}, evidence: "1 loss spikes in 9 steps: step 7: loss 7.5 vs median 4.55 (1.65x), lr 0.0003"},
		{name: "divergence", loss: []float64{5, 4.8, 4.6, 4.5, 4.4, 4.3, inf, inf}, evidence: "2 loss spikes in 8 steps: step 7: loss +Inf"},
		{name: "noise below the ratio", loss: []float64{4, 4.4, 4, 4.4, 4, 4.4, 5, 4, 4.4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse(cfgJSON(t, func(map[string]any) {}))
			require.NoError(t, err)
			rep := doctor.Diagnose(doctor.Input{Run: lossRun(c.loss...), Config: cfg})
			if c.evidence == "" {
				assert.Empty(t, rep.Findings)
				return
			}
			require.Equal(t, []string{"spikes"}, rules(rep.Findings))
			assert.Contains(t, rep.Findings[0].Evidence[0], c.evidence)
			_, ok := advice(rep.Findings[0], "scheduler WarmupLR with warmup_num_steps >= 100")
			assert.True(t, ok, "no scheduler: warmup proposed: %+v", rep.Findings[0].Advice)
		})
	}
}

func TestNothingMeasured(t *testing.T) {
	rep := doctor.Diagnose(doctor.Input{Run: &rundir.Run{}})
	assert.Empty(t, rep.Findings)
	for _, c := range rep.Checked {
		assert.Contains(t, c, "not ", "an empty run is not judged healthy silently: %q", c)
	}
}

// TestMeasured: Report.Measured counts the rules that found series to
// read; a run without csv_monitor series measures nothing, whatever the
// config-only bubble rule says.
func TestMeasured(t *testing.T) {
	noSeries := func(run runfixture.Run) runfixture.Run { run.Values = nil; return run }
	pipelined := noSeries(runfixture.Healthy())
	pipelined.Info.Config = cfgJSON(t, func(c map[string]any) { c["pipeline_model_parallel_size"] = 4 })
	for _, tc := range []struct {
		name     string
		run      runfixture.Run
		measured int
		findings []string
	}{
		{name: "healthy", run: runfixture.Healthy(), measured: 4},
		{name: "no series", run: noSeries(runfixture.Healthy()), measured: 0},
		{name: "no series, pipeline bubble", run: pipelined, measured: 0, findings: []string{"bubble"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := doctor.Diagnose(input(t, tc.run))
			assert.Equal(t, tc.measured, rep.Measured, "checked: %q", rep.Checked)
			assert.ElementsMatch(t, tc.findings, rules(rep.Findings))
		})
	}
}

// A loss spike in a run directory, whose Train/Samples files hold
// DeepSpeed's global_samples (train_loss a batch before lr), is reported at
// its optimizer step with that step's lr and grad_norm, whether deepgo
// (deepgo_run.json) or DeepSpeed (none) wrote the directory.
func TestSpikeInRunDirectory(t *testing.T) {
	const at = 40
	for _, tc := range []struct {
		name     string
		withInfo bool
	}{
		{name: "deepgo", withInfo: true},
		{name: "DeepSpeed", withInfo: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := runfixture.Healthy()
			run.Values[rundir.TagLoss][at-1] *= 3
			if !tc.withInfo {
				run.Info = nil
			}
			in := input(t, run)
			rep := doctor.Diagnose(in)
			require.Contains(t, rules(rep.Findings), "spikes")
			var f doctor.Finding
			for _, x := range rep.Findings {
				if x.Rule == "spikes" {
					f = x
				}
			}
			assert.Contains(t, f.Evidence[0], "1 loss spikes in 60 steps: step 40: loss ")
			assert.Contains(t, f.Evidence[0], ", lr 0.0001, grad_norm ", "the step's lr and grad_norm found")
		})
	}
}

// The Interleaved advice names a micro-batch count the schedule takes: a
// multiple of the stage count (deepgo train refuses others).
func TestBubbleInterleavedAdvice(t *testing.T) {
	for gas, want := range map[int]string{
		1: "pipeline_schedule.type Interleaved with virtual_stages 2: bubble 20.0% at gradient_accumulation_steps 2 (a multiple of the 2 stages, as Interleaved needs)",
		2: "pipeline_schedule.type Interleaved with virtual_stages 2: bubble 20.0% at 2 micro-batches",
	} {
		cfg, err := config.Parse(cfgJSON(t, func(m map[string]any) {
			m["gradient_accumulation_steps"] = gas
			m["pipeline_model_parallel_size"] = 2
		}))
		require.NoError(t, err)
		rep := doctor.Diagnose(doctor.Input{Run: &rundir.Run{}, Config: cfg})
		require.Len(t, rep.Findings, 1)
		require.Len(t, rep.Findings[0].Advice, 2)
		assert.Contains(t, rep.Findings[0].Advice[1].Text, want, "gas %d", gas)
	}
}
