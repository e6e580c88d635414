package deepgo

// Evaluation on the pipeline engine (Trainer.EvalBatch), DeepSpeed's
// PipelineEngine.eval_batch: the forward-only schedule over the given
// micro-batches, the last stage's mean loss averaged over its
// data-parallel ranks and handed to every stage.

import (
	"context"
	"fmt"

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
// once the loss is computed).
func (e *PipeEngine) EvalBatch(ctx context.Context, data []model.MicroBatch) (float64, error) {
	if err := e.openCheck("EvalBatch"); err != nil {
		return 0, err
	}
	ctx = e.devCtx(ctx)
	who := fmt.Sprintf("deepgo: pipeline stage %d: EvalBatch", e.stage)
	if err := agreeEval(ctx, who, data, e.batch.MicroBatch, e.world); err != nil {
		return 0, err
	}
	// every rank has the same count now, so every rank gets the same answer
	sched, err := pipeline.NewInference(e.schedType, e.virtual, len(data), e.stages, e.stage)
	if err != nil {
		return 0, fmt.Errorf("%s: %d micro-batches under pipeline_schedule %q with virtual_stages %d over %d stages: %w",
			who, len(data), e.schedType, e.virtual, e.stages, err)
	}
	e.growBuffers(sched.NumPipeBuffers())
	for c := range e.bufs {
		for b := range e.bufs[c] {
			e.bufs[c][b].mb = -1
		}
	}
	timers, pt := e.timers, e.pt
	lossSum, se := e.runSteps(ctx, sched.Steps(), data, e.execEval)
	if se != nil {
		// a transfer may be half done: the next batch would receive what
		// this one left
		e.broken = fmt.Errorf("deepgo: EvalBatch: %w", se)
		return 0, e.broken
	}
	// the training's: an evaluation counts in no timer, DeepSpeed's
	// PipelineEngine timer lines included (its eval_batch runs the timed
	// instructions too, so there it would)
	e.timers, e.pt = timers, pt
	loss, err := e.meanLoss(ctx, lossSum/float64(len(data)))
	if err != nil {
		return 0, err
	}
	return loss, observeEval(e.mon, e.globalSteps, loss, who)
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
