package deepgo_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stepRecorder is a monitor.Writer keeping each step's events by tag.
type stepRecorder struct {
	mu    sync.Mutex
	steps map[int]map[string]float64
}

func (r *stepRecorder) WriteEvents(step int, events []monitor.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.steps == nil {
		r.steps = map[int]map[string]float64{}
	}
	m := r.steps[step] // an evaluation's eval_loss comes as one more call at its step
	if m == nil {
		m = map[string]float64{}
		r.steps[step] = m
	}
	for _, ev := range events {
		m[ev.Tag] = ev.Value
	}
	return nil
}

func (r *stepRecorder) Close() error { return nil }

// The communication time the monitor reports for a step (comm_time_ms,
// and the share the CommTargetPct warning checks) is a part of that step's
// wall time (step_time_ms): collectives run outside TrainBatch, such as
// the initial parameter broadcast in Initialize (which waits for the
// slowest rank to arrive) or the re-gather of a checkpoint restore, are
// not a step's communication.
func TestMonitorCommShareWithinStep(t *testing.T) {
	const delay = 150 * time.Millisecond // rank 1 arrives late by this much
	for _, tc := range []struct {
		name      string
		stage     int
		precision string
		zeroExtra string
		restore   bool // rank 1 late to a RestoreMaster between steps 1 and 2
	}{
		{name: "stage0/fp32", stage: 0},
		{name: "stage1/fp16", stage: 1, precision: "fp16"},
		{name: "stage2/fp16", stage: 2, precision: "fp16"},
		{name: "stage3/fp16", stage: 3, precision: "fp16"},
		{name: "stage1/fp16/restore", stage: 1, precision: "fp16", restore: true},
		{name: "stage3/fp16/persistent", stage: 3, precision: "fp16", zeroExtra: `, "stage3_param_persistence_threshold": 100000`},
		{name: "stage3/fp16/persistent/restore", stage: 3, precision: "fp16", zeroExtra: `, "stage3_param_persistence_threshold": 100000`, restore: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run{stage: tc.stage, world: 2, gas: 2, precision: tc.precision, zeroExtra: tc.zeroExtra, extra: `, "steps_per_print": 1`}
			rec := &stepRecorder{}
			const nsteps = 3
			data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
			err := newWorld(context.Background(), r.world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
				cfg, err := config.Parse([]byte(r.config()))
				if err != nil {
					return err
				}
				if c.Rank() == 0 {
					opts = append(opts, deepgo.WithMonitorOptions(monitor.WithWriter(rec)))
				} else {
					time.Sleep(delay)
				}
				e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), opts...)
				if err != nil {
					return err
				}
				defer e.Close()
				for s := range nsteps {
					if tc.restore && s == 1 {
						if err := restoreMasters(ctx, e, c.Rank() == 1, delay); err != nil {
							return err
						}
					}
					if _, err := e.TrainBatch(ctx, data.RankBatch(s, globalBatch, r.world, c.Rank(), r.gas)); err != nil {
						return err
					}
				}
				return nil
			})
			require.NoError(t, err)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			require.Len(t, rec.steps, nsteps)
			for s := 1; s <= nsteps; s++ {
				ev := rec.steps[s]
				comm, wall := ev[monitor.TagCommTime], ev[monitor.TagStepTime]
				require.Positive(t, wall, "step %d: %s", s, monitor.TagStepTime)
				share := 100 * comm / wall
				assert.LessOrEqual(t, comm, wall, "step %d: %s %.3f ms is more than the step's wall time %.3f ms (share %.1f%%)",
					s, monitor.TagCommTime, comm, wall, share)
				assert.GreaterOrEqual(t, comm, 0.0, "step %d: %s", s, monitor.TagCommTime)
			}
		})
	}
}

// restoreMasters re-applies e's own fp32 master chunks through
// RestoreMaster (what a checkpoint load does after reading them), rank
// late sleeping first.
func restoreMasters(ctx context.Context, e *deepgo.Engine, late bool, delay time.Duration) error {
	z := e.ZeRO()
	var masters []*tensor.Tensor
	for u := range z.Layout().Units {
		src, err := z.Master(u).Float32s()
		if err != nil {
			return err
		}
		dst, err := tensor.Empty(tensor.Float32, len(src))
		if err != nil {
			return err
		}
		defer dst.Free()
		d, _ := dst.Float32s()
		copy(d, src)
		masters = append(masters, dst)
	}
	if late {
		time.Sleep(delay)
	}
	if err := z.RestoreMaster(ctx, masters); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

// A trainer whose config leaves train_batch_size to be inferred still gets
// the Train/Samples x values at DeepSpeed's global_samples (the resolved
// batch: micro 4 × accumulation 2 × 2 ranks = 16 per step), EvalBatch's
// losses go to eval_loss at the samples of the steps before them (rank 0
// writes what every rank returned), the engine writes deepgo_run.json
// (rewritten at Close with the steps taken), and the monitor's own notes
// (wandb, which deepgo cannot write) reach Notes. A second run into the
// same job folder at another batch size fails Initialize on every rank. On
// the CPU and the simulated device.
func TestEngineMonitorSamplesAndNotes(t *testing.T) {
	for _, dev := range []string{"", "sim"} {
		t.Run(devName(dev), func(t *testing.T) { engineMonitorSamples(t, dev) })
	}
}

// engineMonitorSamples is TestEngineMonitorSamplesAndNotes on dev.
func engineMonitorSamples(t *testing.T, dev string) {
	out := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
		"optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "wandb": {"enabled": true},
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "job"}}`, out)))
	require.NoError(t, err)
	data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
	var notes []string
	var evals [2][2]float64 // rank → before and after training
	err = worldFor(dev)(context.Background(), 2, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), append(opts, deepgo.WithLog(discard{}))...)
		if err != nil {
			return err
		}
		defer e.Close()
		if c.Rank() == 0 {
			notes = e.Notes()
		}
		held := data.RankBatch(9, 16, 2, c.Rank(), 2)
		if evals[c.Rank()][0], err = e.EvalBatch(ctx, held); err != nil {
			return err
		}
		for st := 0; st < 3; st++ {
			if _, err := e.TrainBatch(ctx, data.RankBatch(st, 16, 2, c.Rank(), 2)); err != nil {
				return err
			}
		}
		evals[c.Rank()][1], err = e.EvalBatch(ctx, held)
		return err
	})
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "not supported: wandb monitor") }), "%q", notes)
	xs := func(tag string) []string {
		b, err := os.ReadFile(filepath.Join(out, "job", rundir.FileName(tag)))
		require.NoError(t, err)
		var xs []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
			xs = append(xs, strings.SplitN(line, ",", 2)[0])
		}
		return xs
	}
	assert.Equal(t, []string{"16", "32", "48"}, xs(rundir.TagLR), "lr at step × train_batch_size")
	assert.Equal(t, []string{"0", "48"}, xs(rundir.TagEvalLoss), "eval_loss before training and after 3 steps")
	assert.Equal(t, evals[0], evals[1], "every rank's evaluations are the same")
	s, err := rundir.ReadSeries(filepath.Join(out, "job", rundir.FileName(rundir.TagEvalLoss)))
	require.NoError(t, err)
	assert.Equal(t, evals[0][:], s.Values, "eval_loss is what EvalBatch returned")
	assert.Less(t, evals[0][1], evals[0][0], "training lowered the held-out loss")

	info, err := rundir.ReadInfo(filepath.Join(out, "job", rundir.InfoFile))
	require.NoError(t, err, "the engine's deepgo_run.json")
	want := int64(0)
	for i := 1; i < len(sizes); i++ {
		want += int64(sizes[i-1]*sizes[i] + sizes[i])
	}
	assert.True(t, info.HasConfig())
	wantDev := map[string]string{"": "cpu", "sim": "sim:0"}[dev]
	info.Config = nil
	assert.Equal(t, rundir.Info{World: 2, Device: wantDev, Params: want,
		MemoryCapacityBytes: info.MemoryCapacityBytes, Steps: 3, TrainBatchSize: 16}, *info)
	assert.Positive(t, info.MemoryCapacityBytes)

	// the same job folder at train_batch_size 8: refused on both ranks
	other, err := config.Parse([]byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "job"}}`, out)))
	require.NoError(t, err)
	var refused [2]error
	_ = worldFor(dev)(context.Background(), 2, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
		e, err := initEngine(ctx, other, testmodel.NewMLP(1, sizes...), append(opts, deepgo.WithLog(discard{}))...)
		if err == nil {
			e.Close()
		}
		refused[c.Rank()] = err
		return nil
	})
	for r, err := range refused {
		assert.ErrorContains(t, err, "holds a run at train_batch_size 16; this run's is 8", "rank %d", r)
	}
}

// A trainer's own loop of Forward, Backward and Step (DeepSpeed's
// engine(batch), backward, step) feeds the config's monitors as TrainBatch
// does: the same events at the same steps, the loss the mean over the
// micro-batches and ranks; an evaluation's Forward (no Backward) between
// steps counts in none of them. On the CPU and on the simulated device.
func TestMonitorFedByStep(t *testing.T) {
	for _, dev := range []string{"", "sim"} {
		t.Run(devName(dev), func(t *testing.T) {
			const world, gas, nsteps = 2, 2, 3
			data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
			runLoop := func(manual bool) (*stepRecorder, []float64) {
				rec := &stepRecorder{}
				var losses []float64
				err := worldFor(dev)(context.Background(), world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
					cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
						"zero_optimization": {"stage": 2}, "steps_per_print": 1, "fp16": {"enabled": true, "initial_scale_power": 4},
						"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`))
					if err != nil {
						return err
					}
					if c.Rank() == 0 {
						opts = append(opts, deepgo.WithMonitorOptions(monitor.WithWriter(rec)))
					}
					e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), opts...)
					if err != nil {
						return err
					}
					defer e.Close()
					for s := range nsteps {
						if manual {
							if _, err := e.Forward(ctx, data.RankBatch(40+s, 16, world, c.Rank(), gas)[0]); err != nil {
								return err // an evaluation, never followed by Backward
							}
						}
						l, err := trainStep(ctx, e, data.RankBatch(s, 16, world, c.Rank(), gas), manual)
						if err != nil {
							return err
						}
						if c.Rank() == 0 {
							losses = append(losses, l)
						}
					}
					return nil
				})
				require.NoError(t, err)
				return rec, losses
			}
			want, losses := runLoop(false)
			got, _ := runLoop(true)
			require.Len(t, losses, nsteps)
			require.Len(t, want.steps, nsteps)
			require.Len(t, got.steps, nsteps, "the monitor's steps of a Forward, Backward, Step loop")
			for s := 1; s <= nsteps; s++ {
				assert.Equal(t, losses[s-1], want.steps[s][monitor.TagLoss], "step %d: TrainBatch's loss is the monitor's", s)
				for _, tag := range []string{monitor.TagLoss, monitor.TagLR, monitor.TagLossScale, monitor.TagGradNorm, monitor.TagSkippedSteps, monitor.TagOverflow} {
					require.Contains(t, want.steps[s], tag, "step %d", s)
					assert.Equal(t, want.steps[s][tag], got.steps[s][tag], "step %d: %s", s, tag)
				}
				assert.Positive(t, got.steps[s][monitor.TagTokensPerS], "step %d: tokens/s", s)
			}
		})
	}
}

// wall_clock_breakdown prints DeepSpeed's two kinds of time line: its
// micro timers at every micro-step (fwd_microstep ... step_microstep) and,
// at each accumulation boundary after that micro-step's, the step's global
// timers, whose times are the micro-steps' summed. On the CPU and on the
// simulated device, from TrainBatch and from a Forward, Backward, Step loop.
func TestWallClockBreakdownLines(t *testing.T) {
	micro := regexp.MustCompile(`^\[Rank 0\] time \(ms\) \| fwd_microstep: (\d+\.\d\d) \| bwd_microstep: (\d+\.\d\d) \| bwd_inner_microstep: (\d+\.\d\d) \| bwd_allreduce_microstep: (\d+\.\d\d) \| step_microstep: (\d+\.\d\d)$`)
	global := regexp.MustCompile(`^\[Rank 0\] time \(ms\) \| fwd: (\d+\.\d\d) \| bwd: (\d+\.\d\d) \| bwd_inner: (\d+\.\d\d) \| bwd_allreduce: (\d+\.\d\d) \| step: (\d+\.\d\d)$`)
	for _, dev := range []string{"", "sim"} {
		for _, manual := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/manual=%v", devName(dev), manual), func(t *testing.T) {
				const world, gas, nsteps = 2, 3, 2
				data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
				var log strings.Builder
				err := worldFor(dev)(context.Background(), world, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
					cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3,
						"zero_optimization": {"stage": 1}, "wall_clock_breakdown": true,
						"optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}`))
					if err != nil {
						return err
					}
					w := io.Writer(io.Discard)
					if c.Rank() == 0 {
						w = &log
					}
					e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), append(opts, deepgo.WithLog(w))...)
					if err != nil {
						return err
					}
					defer e.Close()
					for s := range nsteps {
						if _, err := trainStep(ctx, e, data.RankBatch(s, 24, world, c.Rank(), gas), manual); err != nil {
							return err
						}
					}
					return nil
				})
				require.NoError(t, err)
				var lines []string
				for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
					if strings.Contains(l, "time (ms)") {
						lines = append(lines, l)
					}
				}
				require.Len(t, lines, nsteps*(gas+1), "a line per micro-step and per step:\n%s", log.String())
				for s := range nsteps {
					var sum [5]float64
					for m := range gas {
						l := lines[s*(gas+1)+m]
						f := micro.FindStringSubmatch(l)
						require.NotNil(t, f, "step %d micro-step %d: %q", s+1, m+1, l)
						for i := range sum {
							v, err := strconv.ParseFloat(f[i+1], 64)
							require.NoError(t, err)
							sum[i] += v
						}
					}
					l := lines[s*(gas+1)+gas]
					f := global.FindStringSubmatch(l)
					require.NotNil(t, f, "step %d: %q", s+1, l)
					for i := range sum {
						v, err := strconv.ParseFloat(f[i+1], 64)
						require.NoError(t, err)
						assert.InDelta(t, v, sum[i], 0.005*float64(gas+1), "step %d: field %d is its micro-steps' sum (to the printed rounding)", s+1, i)
					}
				}
			})
		}
	}
}

// trainStep is one optimizer step over mbs: TrainBatch, or with manual the
// trainer's own loop of Forward, Backward and Step (whose loss it returns
// as 0: Step does not give it back).
func trainStep(ctx context.Context, e *deepgo.Engine, mbs []model.MicroBatch, manual bool) (float64, error) {
	if !manual {
		return e.TrainBatch(ctx, mbs)
	}
	for _, mb := range mbs {
		if _, err := e.Forward(ctx, mb); err != nil {
			return 0, err
		}
		if err := e.Backward(ctx); err != nil {
			return 0, err
		}
		if err := e.Step(ctx); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// DeepSpeed's progress lines on the reporting rank's log: step=0 as
// Initialize ends, then every steps_per_print optimizer steps, each with
// the skipped steps and the lr and betas the next step uses; another
// rank's log gets none. On the CPU and the simulated device, from
// TrainBatch and from a Forward, Backward, Step loop.
func TestProgressLines(t *testing.T) {
	for _, dev := range []string{"", "sim"} {
		for _, manual := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/manual=%v", devName(dev), manual), func(t *testing.T) {
				cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "steps_per_print": 2,
					"fp16": {"enabled": true, "initial_scale_power": 18, "hysteresis": 1},
					"optimizer": {"type": "Adam", "params": {"lr": 0.01}},
					"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 4, "warmup_type": "linear"}}}`))
				require.NoError(t, err)
				data := testmodel.NewDataset(42, 64, sizes[0], sizes[len(sizes)-1])
				var logs [2]strings.Builder
				var want []string
				err = worldFor(dev)(context.Background(), 2, func(ctx context.Context, c comm.Comm, opts []deepgo.Option) error {
					e, err := initEngine(ctx, cfg, testmodel.NewMLP(1, sizes...), append(opts, deepgo.WithLog(&logs[c.Rank()]))...)
					if err != nil {
						return err
					}
					defer e.Close()
					line := func() string {
						return fmt.Sprintf("[Rank 0] step=%d, skipped=%d, lr=[%s], mom=[(0.9, 0.999)]", e.GlobalSteps(), e.SkippedSteps(), config.PyFloatRepr(e.LR()))
					}
					if c.Rank() == 0 {
						want = append(want, line())
					}
					for s := range 4 {
						if _, err := trainStep(ctx, e, data.RankBatch(s, 16, 2, c.Rank(), 2), manual); err != nil {
							return err
						}
						if c.Rank() == 0 && e.GlobalSteps()%2 == 0 {
							want = append(want, line())
						}
					}
					return nil
				})
				require.NoError(t, err)
				var got []string
				for _, l := range strings.Split(logs[0].String(), "\n") {
					if strings.HasPrefix(l, "[Rank 0] step=") {
						got = append(got, l)
					}
				}
				assert.Equal(t, want, got)
				assert.Contains(t, got[1], "skipped=1", "fp16 at 2^18 overflows at first: %q", got)
				assert.NotContains(t, logs[1].String(), "step=", "rank 1 prints none")
			})
		}
	}
}
