package deepgo_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipeTimerCase is one run of TestPipelineWallClockBreakdown: 2 stages
// (1F1B) × dp data ranks, printing every spp steps (0: steps_per_print
// unset).
type pipeTimerCase struct{ dp, spp, steps int }

// DeepSpeed's PipelineEngine lines on global rank 0, stage 0 of a 2-stage
// pipeline (deepspeed/runtime/pipe/engine.py: the micro and global timers
// at the end of _exec_optimizer_step, the transfers at the end of
// train_batch; stage 0 never receives activations nor sends gradients, so
// DeepSpeed has no pipe_recv_input or pipe_send_grad timer there).
var (
	pipeMicroRe  = regexp.MustCompile(`^\[Rank 0\] time \(ms\) \| batch_input: (\d+\.\d\d) \| fwd_microstep: (\d+\.\d\d) \| bwd_microstep: (\d+\.\d\d) \| bwd_inner_microstep: (\d+\.\d\d) \| bwd_allreduce_microstep: (\d+\.\d\d) \| step_microstep: (\d+\.\d\d)$`)
	pipeGlobalRe = regexp.MustCompile(`^\[Rank 0\] time \(ms\) \| fwd: (\d+\.\d\d) \| bwd: (\d+\.\d\d) \| bwd_inner: (\d+\.\d\d) \| bwd_allreduce: (\d+\.\d\d) \| step: (\d+\.\d\d)$`)
	pipeCommRe   = regexp.MustCompile(`^\[Rank 0\] time \(ms\) \| pipe_send_output: (\d+\.\d\d) \| pipe_recv_grad: (\d+\.\d\d)$`)
	// the timers each line prints, as PipeTimers names them (a micro
	// timer spans what its global one does)
	pipeMicroNames  = []string{"batch_input", "fwd", "bwd", "bwd_inner", "bwd_allreduce", "step"}
	pipeGlobalNames = []string{"fwd", "bwd", "bwd_inner", "bwd_allreduce", "step"}
	pipeCommNames   = []string{"pipe_send_output", "pipe_recv_grad"}
)

// With wall_clock_breakdown the pipeline engine prints DeepSpeed's
// PipelineEngine timer lines, not the data-parallel engine's: on the
// world's rank 0 only, every steps_per_print steps, the micro line
// (batch_input, fwd_microstep ... step_microstep) and the global line
// (fwd ... step) at the step, the transfer line (pipe_*) after the batch;
// each value the time its timer ran since the last print, every
// micro-batch summed, the micro timers' the global ones' (one span,
// reset together, as in DeepSpeed). Every timer a stage runs is positive,
// bwd holds bwd_inner and bwd_allreduce, and the monitor's elapsed_time_ms
// tags are the same times per step. Without steps_per_print (DeepSpeed
// 0.19.8 fails there) the lines wait for the monitor's 50 steps and Notes
// says so. On the CPU backend and the simulated device with delays.
func TestPipelineWallClockBreakdown(t *testing.T) {
	for _, dev := range []string{"", "sim+delay"} {
		for _, c := range pipeTimerCases() {
			t.Run(fmt.Sprintf("%s/%s", devName(dev), c), func(t *testing.T) { pipeWallClock(t, dev, c) })
		}
	}
}

// pipeTimerCases are TestPipelineWallClockBreakdown's runs (and its CUDA
// twin's).
func pipeTimerCases() []pipeTimerCase {
	return []pipeTimerCase{{dp: 1, spp: 2, steps: 4}, {dp: 2, spp: 2, steps: 4}, {dp: 1, spp: 0, steps: 2}}
}

func (c pipeTimerCase) String() string { return fmt.Sprintf("dp%d/spp%d", c.dp, c.spp) }

// pipeWallClock is TestPipelineWallClockBreakdown's case c on dev.
func pipeWallClock(t *testing.T, dev string, c pipeTimerCase) {
	const pp, gas, micro, seqLen, vocab = 2, 3, 2, 16, 32
	world := pp * c.dp
	src, err := data.NewMarkov(vocab, 1, 2, 3)
	require.NoError(t, err)
	corpus := &data.Tokens{IDs: src.Generate(4000, 4), Vocab: vocab}
	out := t.TempDir()
	spp := ""
	if c.spp > 0 {
		spp = fmt.Sprintf(`"steps_per_print": %d,`, c.spp)
	}
	cfgJSON := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": %d, %s
		"pipeline_model_parallel_size": %d, "pipeline_schedule": {"type": "1F1B"}, "pipeline": {"partition": "uniform"},
		"zero_optimization": {"stage": 1}, "wall_clock_breakdown": true,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
		"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "pt"}}`, micro, gas, spp, pp, out)
	var (
		mu    sync.Mutex
		logs  = make([]strings.Builder, world)
		snaps = make([][]map[string]time.Duration, world) // per rank, per step: PipeTimers after it
		tms   = make([]deepgo.Timers, world)              // per rank: Timers after the last step
		notes = make([][]string, world)
	)
	err = worldFor(dev)(context.Background(), world, func(ctx context.Context, cm comm.Comm, opts []deepgo.Option) error {
		gc := nn.GPTConfig{Layers: 2, Heads: 2, Width: 32, Vocab: vocab, SeqLen: seqLen}
		opts = append(opts, deepgo.WithLog(&logs[cm.Rank()]))
		return withGPTOpts(ctx, cfgJSON, gc, 1, asIsGPT, opts, func(tr deepgo.Trainer) error {
			pe, ok := tr.(*deepgo.PipeEngine)
			if !ok {
				return fmt.Errorf("Initialize returned %T, want *deepgo.PipeEngine", tr)
			}
			d := cm.Rank() % c.dp // pipe outermost: a stage's data ranks are adjacent
			var mine []map[string]time.Duration
			for step := range c.steps {
				mbs := make([]model.MicroBatch, gas)
				for i := range mbs {
					k := ((step*c.dp+d)*gas + i) * micro
					mbs[i] = corpus.MakeBatch([]int{k, k + 1}, seqLen).MicroBatch()
				}
				if _, err := pe.TrainBatch(ctx, mbs); err != nil {
					return err
				}
				mine = append(mine, pe.PipeTimers())
				// an evaluation between steps counts in no timer, printed or not
				pt0, tm0 := pe.PipeTimers(), pe.Timers()
				if _, err := pe.EvalBatch(ctx, mbs); err != nil {
					return err
				}
				if pt1, tm1 := pe.PipeTimers(), pe.Timers(); !maps.Equal(pt0, pt1) || tm0 != tm1 {
					return fmt.Errorf("rank %d: EvalBatch moved the timers: %v -> %v, %+v -> %+v", cm.Rank(), pt0, pt1, tm0, tm1)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			snaps[cm.Rank()], tms[cm.Rank()], notes[cm.Rank()] = mine, pe.Timers(), pe.Notes()
			return nil
		})
	})
	require.NoError(t, err)

	for r := 1; r < world; r++ {
		assert.NotContains(t, logs[r].String(), "time (ms)", "rank %d (stage %d): only the world's rank 0 prints", r, r/c.dp)
	}
	for r := range world {
		last := snaps[r][c.steps-1]
		want := []string{"batch_input", "fwd", "bwd", "bwd_inner", "bwd_allreduce", "step", "pipe_send_output", "pipe_recv_grad"}
		if r/c.dp == pp-1 {
			want = []string{"batch_input", "fwd", "bwd", "bwd_inner", "bwd_allreduce", "step", "pipe_recv_input", "pipe_send_grad"}
		}
		assert.ElementsMatch(t, want, timerNames(last), "rank %d: the timers its stage runs", r)
		for _, n := range want {
			assert.Positive(t, last[n], "rank %d: %s", r, n)
		}
		for s, m := range snaps[r] {
			assert.GreaterOrEqual(t, m["bwd"], m["bwd_inner"]+m["bwd_allreduce"], "rank %d step %d: bwd spans bwd_inner and bwd_allreduce", r, s+1)
		}
		tm := tms[r]
		assert.LessOrEqual(t, last["fwd"], tm.Forward, "rank %d: Timers().Forward holds the module forwards (and the loss)", r)
		assert.Positive(t, tm.Backward, "rank %d: Timers().Backward", r)
		assert.LessOrEqual(t, tm.Backward, last["bwd_inner"], "rank %d: Timers().Backward is the module backwards, inside bwd_inner", r)
		assert.LessOrEqual(t, tm.Step, last["step"], "rank %d: Timers().Step inside step", r)
		assert.Positive(t, tm.Comm, "rank %d: Timers().Comm (the transfers, the reductions)", r)
	}

	lines := timeLines(logs[0].String())
	t.Logf("rank 0:\n%s", strings.Join(lines, "\n"))
	if c.spp == 0 {
		assert.Empty(t, lines, "no lines before the monitor's 50 steps")
		assert.Contains(t, strings.Join(notes[0], "\n"), "wall_clock_breakdown without steps_per_print: the pipeline's timer lines come every 50 steps")
		return
	}
	for r := range world {
		assert.NotContains(t, strings.Join(notes[r], "\n"), "without steps_per_print", "rank %d", r)
	}
	prints := c.steps / c.spp
	require.Len(t, lines, 3*prints, "three lines every %d steps:\n%s", c.spp, logs[0].String())
	run, err := rundir.Read(filepath.Join(out, "pt"))
	require.NoError(t, err)
	tags := map[string]string{"fwd": rundir.TagForwardMS, "bwd": rundir.TagBackwardMS, "bwd_inner": rundir.TagBackwardInnerMS,
		"bwd_allreduce": rundir.TagBackwardReduceMS, "step": rundir.TagStepMS}
	prev := map[string]time.Duration{}
	for p := range prints {
		step := (p + 1) * c.spp
		now := snaps[0][step-1]
		since := func(n string) string { return fmt.Sprintf("%.2f", float64(now[n]-prev[n])/1e6) }
		for i, l := range []struct {
			re    *regexp.Regexp
			names []string
		}{{pipeMicroRe, pipeMicroNames}, {pipeGlobalRe, pipeGlobalNames}, {pipeCommRe, pipeCommNames}} {
			line := lines[3*p+i]
			f := l.re.FindStringSubmatch(line)
			require.NotNil(t, f, "step %d, line %d: %q", step, i+1, line)
			for j, n := range l.names {
				assert.Equal(t, since(n), f[j+1], "step %d: %s is its time since the last print: %q", step, n, line)
			}
		}
		for _, n := range []string{"fwd", "bwd", "bwd_inner", "step"} {
			assert.NotEqual(t, "0.00", since(n), "step %d: %s printed positive", step, n)
		}
		for n, tag := range tags {
			s := run.Get(tag)
			require.NotNil(t, s, tag)
			require.Len(t, s.Values, c.steps, tag)
			var sum float64
			for k := step - c.spp; k < step; k++ {
				sum += s.Values[k]
			}
			assert.InDelta(t, float64(now[n]-prev[n])/1e6, sum, 1e-6, "step %d: %s's monitor values are the printed times per step", step, tag)
		}
		prev = now
	}
}

// timeLines are the wall_clock_breakdown lines of log.
func timeLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "time (ms)") {
			out = append(out, l)
		}
	}
	return out
}

// timerNames lists m's keys.
func timerNames(m map[string]time.Duration) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
