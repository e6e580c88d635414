package deepgo

// Evaluation on the pipeline engine (Trainer.EvalBatch), DeepSpeed's
// PipelineEngine.eval_batch: the forward-only schedule over the given
// micro-batches, the last stage's mean loss averaged over its
// data-parallel ranks and handed to every stage.

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/pipeline"
)

// EvalBatch runs data, one or more micro-batches of this pipe (every stage
// of a data-parallel coordinate passes the same ones, as to TrainBatch),
// forward through the pipeline with no gradient and returns the mean loss
// over the micro-batches and the data-parallel ranks, the same on every
// rank (see Trainer.EvalBatch). It runs DeepSpeed's InferenceSchedule
// (pipeline.NewInference) whatever the training schedule, but under the
// interleaved schedule, whose stages hold several chunks, the interleaved
// order's forward half: len(data) must then be a multiple of the stages.
// Each buffer's activations are freed once sent on (or, on the last stage,
// once the loss is computed). It is Evaluate with no options.
func (e *PipeEngine) EvalBatch(ctx context.Context, data []model.MicroBatch) (float64, error) {
	res, err := e.evaluate(ctx, "EvalBatch", data, EvalOptions{})
	return res.Loss, err
}

// Evaluate is EvalBatch returning what opts asks for besides the mean
// loss (see Trainer.Evaluate): the outputs on the last stage only (nil on
// the others), the per-micro-batch losses of this pipe's last stage on
// every stage of the pipe.
func (e *PipeEngine) Evaluate(ctx context.Context, data []model.MicroBatch, opts EvalOptions) (EvalResult, error) {
	return e.evaluate(ctx, "Evaluate", data, opts)
}

// evaluate is EvalBatch and Evaluate (op: which, for the errors).
func (e *PipeEngine) evaluate(ctx context.Context, op string, data []model.MicroBatch, opts EvalOptions) (EvalResult, error) {
	if err := e.openCheck(op); err != nil {
		return EvalResult{}, err
	}
	ctx = e.devCtx(ctx)
	who := fmt.Sprintf("deepgo: pipeline stage %d: %s", e.stage, op)
	if err := agreeEval(ctx, who, data, e.batch.MicroBatch, opts, e.world); err != nil {
		return EvalResult{}, err
	}
	// every rank has the same count now, so every rank gets the same answer
	sched, err := pipeline.NewInference(e.schedType, e.virtual, len(data), e.stages, e.stage)
	if err != nil {
		return EvalResult{}, fmt.Errorf("%s: %d micro-batches under pipeline_schedule %q with virtual_stages %d over %d stages: %w",
			who, len(data), e.schedType, e.virtual, e.stages, err)
	}
	e.growBuffers(sched.NumPipeBuffers())
	for c := range e.bufs {
		for b := range e.bufs[c] {
			e.bufs[c][b].mb = -1
		}
	}
	timers, pt := e.timers, e.pt
	e.eval = newEvalRun(opts, len(data))
	run := e.eval
	if e.stage != e.stages-1 {
		run.outs = nil // the last stage's alone: the others return none
	}
	defer func() { e.eval = nil; run.free() }() // a failure's outputs; the result takes them otherwise
	lossSum, se := e.runSteps(ctx, sched.Steps(), data, e.execEval)
	if se != nil {
		// a transfer may be half done: the next batch would receive what
		// this one left
		e.broken = fmt.Errorf("deepgo: %s: %w", op, se)
		return EvalResult{}, e.broken
	}
	// the training's: an evaluation counts in no timer, DeepSpeed's
	// PipelineEngine timer lines included (its eval_batch runs the timed
	// instructions too, so there it would)
	e.timers, e.pt = timers, pt
	if opts.NoLoss {
		return run.result(0, nil), nil
	}
	mine := lossSum / float64(len(data))
	var loss float64
	var losses []float64
	if opts.PerMicroBatch {
		loss, losses, err = e.pipeLosses(ctx, mine, run.losses)
	} else {
		loss, err = e.meanLoss(ctx, mine)
	}
	if err != nil {
		return EvalResult{}, err
	}
	return run.result(loss, losses), observeEval(e.mon, e.globalSteps, loss, who)
}

// pipeLosses is meanLoss's mean of mine, with the per-micro-batch losses
// of the last stage of this rank's pipe (its own on the last stage, a
// slice of len(losses)): one gather over the world of mine and losses.
func (e *PipeEngine) pipeLosses(ctx context.Context, mine float64, losses []float64) (float64, []float64, error) {
	n := 1 + len(losses)
	send := make([]int64, 0, n)
	for _, v := range append([]float64{mine}, losses...) {
		send = append(send, int64(math.Float64bits(v)))
	}
	vals, err := comm.AllGatherInt64s(ctx, e.world, send)
	if err != nil {
		return 0, nil, fmt.Errorf("deepgo: pipeline stage %d: gathering the losses: %w", e.stage, err)
	}
	coord := e.grid.Coord(e.world.Rank())
	coord[slices.Index(e.grid.Axes(), comm.AxisPipe)] = e.stages - 1
	last, err := e.grid.Rank(coord...)
	if err != nil {
		return 0, nil, fmt.Errorf("deepgo: pipeline stage %d: the last stage of this pipe: %w", e.stage, err)
	}
	var sum float64
	var count int
	for r := 0; r < len(vals)/n; r++ {
		if e.grid.CoordOf(r, comm.AxisPipe) == e.stages-1 {
			sum += math.Float64frombits(uint64(vals[r*n]))
			count++
		}
	}
	out := make([]float64, len(losses))
	for i := range out {
		out[i] = math.Float64frombits(uint64(vals[last*n+1+i]))
	}
	return sum / float64(count), out, nil
}

// execEval runs one instruction of the evaluation's schedule and returns
// the loss a last-stage forward computed (0 otherwise).
func (e *PipeEngine) execEval(ctx context.Context, in pipeline.Instruction, data []model.MicroBatch) (float64, error) {
	switch in.Op {
	case pipeline.LoadMicroBatch, pipeline.RecvActivation:
		return e.exec(ctx, in, data)
	case pipeline.ForwardPass:
		return e.forward(ctx, in.Chunk, in.BufferID, in.MicroBatch, data, true)
	case pipeline.SendActivation:
		_, err := e.exec(ctx, in, data)
		e.bufs[in.Chunk][in.BufferID].free() // sent on: nothing more needs it
		return 0, err
	}
	return 0, fmt.Errorf("instruction %v in a forward-only schedule", in.Op)
}

// evalLast is the last stage's end of micro-batch mb's forward in an
// evaluation: its output to e.eval, its unscaled loss (none under NoLoss:
// 0); the buffer's activations freed.
func (e *PipeEngine) evalLast(ctx context.Context, p model.Part, buf *pipeBuffer, act model.Activation, mb int, data []model.MicroBatch) (float64, error) {
	defer buf.free()
	if err := e.eval.record(e.be, mb, act); err != nil {
		return 0, err
	}
	if e.eval.opts.NoLoss {
		return 0, nil
	}
	loss, _, err := p.Loss(ctx, act, data[mb].Target, 1)
	if err != nil {
		return 0, fmt.Errorf("loss: %w", err)
	}
	e.eval.losses[mb] = loss
	return loss, nil
}

// free frees the buffer's activations and forgets its micro-batch; the
// receive buffers stay (the part's or the engine's memory).
func (b *pipeBuffer) free() {
	b.arena.Close()
	b.mb, b.out, b.gradOut, b.gradIn, b.lossDone = -1, nil, nil, nil, false
}

// newBuffer is an empty pipeline buffer whose arena allocates where the
// engine computes (device memory, as the data-parallel engine's).
func (e *PipeEngine) newBuffer() *pipeBuffer {
	buf := &pipeBuffer{mb: -1}
	if !e.be.Device().IsCPU() {
		buf.arena.SetAlloc(e.be.Empty)
	}
	return buf
}

// growBuffers gives every chunk at least n pipeline buffers (the
// evaluation's schedule may want more than the training's: GPipe over one
// micro-batch has one, the interleaved schedule's count grows with the
// micro-batches); their parts are made on first use.
func (e *PipeEngine) growBuffers(n int) {
	for c := range e.bufs {
		for len(e.bufs[c]) < n {
			e.bufs[c] = append(e.bufs[c], e.newBuffer())
			e.parts[c] = append(e.parts[c], nil)
		}
	}
}
