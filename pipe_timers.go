package deepgo

// The pipeline engine's wall_clock_breakdown: DeepSpeed's PipelineEngine
// timers (deepspeed/runtime/pipe/engine.py, 0.19.8), each wrapping the
// instruction or pass DeepSpeed's wraps, and its three timers.log lines,
// printed on the world's rank 0 (DeepSpeed's global rank 0) every
// steps_per_print steps: batch_input and the micro timers, then the global
// timers, at the end of OptimizerStep; the transfers (pipe_*) at the end of
// TrainBatch. Each value is "%.2f" ms since the last print, every
// micro-batch summed; a timer that never ran is left out. The
// PipelineEngine never calls DeepSpeedEngine.step, so its micro timers and
// global timers wrap the same spans and reset together: one accumulator
// serves both names here.
//
// Where deepgo's spans differ from DeepSpeed's (docs/design.md,
// Monitoring, has the rest):
//   - fwd is the stage's module forwards: the last stage's loss (forward
//     and gradient, one call in Part.Loss) is in no timer, as DeepSpeed's
//     loss_fn runs outside its fwd timer.
//   - bwd_allreduce is the backward's epilogue (zero's EndBackward):
//     DeepSpeed's PipelineEngine turns the backward's all-reduce off and
//     the timer spans _backward_epilogue; its timers exist from start-up,
//     so its stage 0 prints 0.00 where deepgo prints what it measured.
//   - step includes the data-parallel gradient reduction, which deepgo's
//     ZeRO optimizer runs at the step and DeepSpeed in its untimed
//     ReduceGrads. The tied-weight all-reduce is untimed in DeepSpeed and
//     in no timer here (Timers().Comm has it).
//   - train_batch is not one of these timers: DeepSpeed uses it only for
//     its "steps: ... samples/sec" line, whose window progress.go keeps
//     (batchWindow).
//   - Without steps_per_print DeepSpeed 0.19.8 stops at its first
//     optimizer step (global_steps % None); deepgo prints at the monitor's
//     interval (50) and says so in Notes.
//   - DeepSpeed 0.19.8 itself, with wall_clock_breakdown, fails on every
//     stage but the last at the first backward ("bwd_microstep timer has
//     already been started"); these are the lines its code prints once
//     that is mended.

import (
	"fmt"
	"strings"
	"time"

	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/pipeline"
)

// pipeTimer is one of DeepSpeed's PipelineEngine timers.
type pipeTimer int

const (
	ptBatchInput   pipeTimer = iota // LoadMicroBatch
	ptFwd                           // the stage's module forwards
	ptBwd                           // the backward pass
	ptBwdInner                      // its module backwards with their ZeRO hooks
	ptBwdAllreduce                  // its epilogue (EndBackward)
	ptStep                          // OptimizerStep
	ptSendOutput                    // SendActivation
	ptSendGrad                      // SendGrad
	ptRecvInput                     // RecvActivation
	ptRecvGrad                      // RecvGrad
	numPipeTimers
)

// pipeField is a timer as one log line names it.
type pipeField struct {
	t    pipeTimer
	name string
}

// The three lines' timers, in DeepSpeed's order (pipe/engine.py's
// timers.log calls).
var (
	pipeMicroLine = []pipeField{{ptBatchInput, "batch_input"}, {ptFwd, "fwd_microstep"}, {ptBwd, "bwd_microstep"},
		{ptBwdInner, "bwd_inner_microstep"}, {ptBwdAllreduce, "bwd_allreduce_microstep"}, {ptStep, "step_microstep"}}
	pipeGlobalLine = []pipeField{{ptFwd, "fwd"}, {ptBwd, "bwd"}, {ptBwdInner, "bwd_inner"},
		{ptBwdAllreduce, "bwd_allreduce"}, {ptStep, "step"}}
	pipeCommLine = []pipeField{{ptSendOutput, "pipe_send_output"}, {ptSendGrad, "pipe_send_grad"},
		{ptRecvInput, "pipe_recv_input"}, {ptRecvGrad, "pipe_recv_grad"}}
)

// pipeOpTimers are the timers that wrap a whole instruction.
var pipeOpTimers = map[pipeline.Op]pipeTimer{
	pipeline.LoadMicroBatch: ptBatchInput,
	pipeline.SendActivation: ptSendOutput,
	pipeline.SendGrad:       ptSendGrad,
	pipeline.RecvActivation: ptRecvInput,
	pipeline.RecvGrad:       ptRecvGrad,
	pipeline.OptimizerStep:  ptStep,
}

// pipeTimers is a stage's timers: their time since the engine started,
// at the last print, and at the last monitor record.
type pipeTimers struct {
	total, shown, observed [numPipeTimers]time.Duration
	ran                    [numPipeTimers]bool // a DeepSpeed timer exists once started
}

// add counts d in timer t.
func (p *pipeTimers) add(t pipeTimer, d time.Duration) {
	p.total[t] += d
	p.ran[t] = true
}

// line is SynchronizedWallClockTimer.log's line of fields on rank: each
// timer that has run, its time since the last print in ms.
func (p *pipeTimers) line(rank int, fields []pipeField) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[Rank %d] time (ms)", rank)
	for _, f := range fields {
		if p.ran[f.t] {
			fmt.Fprintf(&b, " | %s: %.2f", f.name, float64(p.total[f.t]-p.shown[f.t])/1e6)
		}
	}
	return b.String()
}

// reset starts the fields' next print from now (log's reset=True).
func (p *pipeTimers) reset(fields ...[]pipeField) {
	for _, fs := range fields {
		for _, f := range fs {
			p.shown[f.t] = p.total[f.t]
		}
	}
}

// breakdown is the global timers' time since the last call, for the
// monitor's record.
func (p *pipeTimers) breakdown() *monitor.Breakdown {
	d := func(t pipeTimer) time.Duration { return p.total[t] - p.observed[t] }
	b := &monitor.Breakdown{Forward: d(ptFwd), Backward: d(ptBwd), BackwardInner: d(ptBwdInner),
		BackwardAllreduce: d(ptBwdAllreduce), Step: d(ptStep)}
	p.observed = p.total
	return b
}

// timersDue says whether this step prints the timer lines (every rank
// resets them, as DeepSpeed's log does; rank 0 prints).
func (e *PipeEngine) timersDue() bool {
	if !e.cfg.WallClockBreakdown && !e.cfg.FlopsProfiler.Enabled {
		return false
	}
	if e.mon == nil { // closed
		return false
	}
	every := e.mon.PrintEvery() // steps_per_print, else the monitor's 50
	if sp := e.cfg.StepsPerPrint; sp != nil && *sp > 0 {
		every = *sp
	}
	return e.globalSteps%every == 0
}

// logTimers prints lines (DeepSpeed's timers.log calls, one per line) on
// the world's rank 0 and resets their timers, when this step prints.
func (e *PipeEngine) logTimers(lines ...[]pipeField) {
	if !e.timersDue() {
		return
	}
	if e.world.Rank() == 0 {
		for _, l := range lines {
			fmt.Fprintln(e.log, e.pt.line(0, l))
		}
	}
	e.pt.reset(lines...)
}

// PipeTimers is the time this rank has spent in each of DeepSpeed's
// PipelineEngine timers since the engine started, by DeepSpeed's name
// (batch_input, fwd, bwd, bwd_inner, bwd_allreduce, step,
// pipe_send_output, pipe_send_grad, pipe_recv_input, pipe_recv_grad),
// those its stage has run only (stage 0 receives no activation, say). The
// micro timers (fwd_microstep ...) wrap the same spans as the global ones.
// wall_clock_breakdown prints their sums since the last print on rank 0
// (docs/design.md, Monitoring); on a device the spans synchronize with it
// only.
func (e *PipeEngine) PipeTimers() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, l := range [][]pipeField{pipeMicroLine[:1], pipeGlobalLine, pipeCommLine} {
		for _, f := range l {
			if e.pt.ran[f.t] {
				out[f.name] = e.pt.total[f.t]
			}
		}
	}
	return out
}

// pipeTimerNote is the note of a config that turns wall_clock_breakdown on
// without steps_per_print.
func pipeTimerNote(every int) string {
	return fmt.Sprintf("wall_clock_breakdown without steps_per_print: the pipeline's timer lines come every %d steps (DeepSpeed 0.19.8's PipelineEngine stops at its first optimizer step there: global_steps %% None)", every)
}
