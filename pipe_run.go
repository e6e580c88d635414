package deepgo

// The pipeline engine's execution of a schedule's instruction stream: one
// TrainBatch runs every step of the stage's schedule in order, each
// instruction on the buffer it names.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/pipeline"
	"github.com/deepgo-ml/deepgo/tensor"
)

// pipeBuffer is one pipeline buffer of one chunk: the micro-batch it
// holds and the tensors crossing the stage boundary for it.
type pipeBuffer struct {
	mb       int            // the micro-batch prepared in it, -1 for none
	in       *tensor.Tensor // the activation entering the chunk (received), nil on virtual stage 0
	out      model.Activation
	gradOut  model.Activation // the gradient of out: the loss's, or grad
	grad     *tensor.Tensor   // receive buffer for the gradient of out (engine-owned)
	gradIn   model.Activation // the gradient of in, to send back
	arena    tensor.Arena
	lossDone bool
}

// maxIdleShares bounds the idle shares the engine remembers (the latest).
const maxIdleShares = 1024

// PipeStageError is the error of one stage of a pipeline: the stage, the
// schedule step and instruction it failed in, and the cause (a comm error
// names the peer and the deadline).
type PipeStageError struct {
	Stage       int
	Step        int
	Instruction string
	Err         error
	// Unresponsive lists, after a failed transfer, the stages that did not
	// answer the roll call that followed: the dead or stuck ones.
	Unresponsive []int
}

// Error names the stage, the step and the instruction, and after a failed
// transfer the stages that did not answer the roll call.
func (e *PipeStageError) Error() string {
	msg := fmt.Sprintf("pipeline stage %d: step %d: %s: %v", e.Stage, e.Step, e.Instruction, e.Err)
	if len(e.Unresponsive) > 0 {
		st := make([]string, len(e.Unresponsive))
		for i, s := range e.Unresponsive {
			st[i] = fmt.Sprint(s)
		}
		msg += fmt.Sprintf(" (stages not answering: %s)", strings.Join(st, ", "))
	}
	return msg
}

// rollCall runs after a failed transfer: the stages still running meet
// in a short all-gather over the world, and the ranks that do not come are
// dead or stuck. A stage sees only its neighbours, which may themselves be
// waiting on the faulty stage; the roll call names that one. The window
// is a quarter of how long the transfer waited (the other live stages
// fail within moments of each other, their transfers sharing one
// deadline), at least 50 ms. It returns the stages that did not answer,
// nil when all did (the fault was not a missing stage).
func (e *PipeEngine) rollCall(ctx context.Context, waited time.Duration) []int {
	rctx, cancel := context.WithTimeout(ctx, max(waited/4, 50*time.Millisecond))
	defer cancel()
	_, err := comm.AllGatherInt64s(rctx, e.world, []int64{int64(e.stage)})
	var ce *comm.Error
	if err == nil || !errors.As(err, &ce) || ce.Group != e.world.Name() {
		return nil
	}
	var out []int
	for _, r := range ce.Ranks {
		if r >= 0 && r < e.grid.Size() {
			if s := e.grid.CoordOf(r, comm.AxisPipe); !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Unwrap returns the cause.
func (e *PipeStageError) Unwrap() error { return e.Err }

// TrainBatch runs one optimizer step over data, gradient_accumulation_steps
// micro-batches, through the pipeline: every rank of a pipe (the stages of
// one data-parallel coordinate) passes the same micro-batches (the first
// stage reads their inputs, the last their targets, the others their
// shape). It returns the mean loss over the micro-batches and the
// data-parallel ranks, the same on every rank.
func (e *PipeEngine) TrainBatch(ctx context.Context, data []model.MicroBatch) (float64, error) {
	if err := e.openCheck("TrainBatch"); err != nil {
		return 0, err
	}
	ctx = e.devCtx(ctx)
	// A wrong micro-batch size is this rank's error; the agreement tells
	// the others before anyone starts the batch (it marks nobody).
	var sizeErr error
	for i, mb := range data {
		if s, ok := mb.Input.(model.Sized); ok && s.BatchSize() != e.batch.MicroBatch {
			sizeErr = fmt.Errorf("deepgo: pipeline stage %d: TrainBatch: micro-batch %d holds %d samples, train_micro_batch_size_per_gpu is %d", e.stage, i, s.BatchSize(), e.batch.MicroBatch)
			break
		}
	}
	if err := e.agreeSchedule(ctx, len(data), sizeErr == nil); sizeErr != nil {
		return 0, sizeErr
	} else if err != nil {
		return 0, err
	}
	for c := range e.bufs {
		for b := range e.bufs[c] {
			e.bufs[c][b].mb = -1
		}
	}
	t0, busy0, skipped0 := time.Now(), e.busy(), e.skippedSteps
	e.beginFlops(data)
	lossSum, se := e.runSteps(ctx, e.steps, data, e.exec)
	if se != nil {
		e.broken = se
		return 0, se
	}
	if wall := time.Since(t0); wall > 0 {
		busy := e.busy() - busy0
		if len(e.idle) == maxIdleShares {
			e.idle = append(e.idle[:0], e.idle[1:]...)
		}
		e.idle = append(e.idle, 1-busy.Seconds()/wall.Seconds())
	}
	loss, err := e.meanLoss(ctx, lossSum/float64(len(data)))
	if err != nil {
		return 0, err
	}
	took := time.Since(t0)
	e.reportBatch(loss, took)
	e.logTimers(pipeCommLine)
	// rank 0's report failing must not skip the monitor's collective the
	// other ranks enter
	ferr := e.endFlops()
	return loss, errors.Join(ferr, e.observe(ctx, loss, took, e.skippedSteps > skipped0, data))
}

// runSteps executes steps instruction by instruction with exec and
// returns the sum of the losses exec returned (the last stage's forwards'),
// or the first failure as a *PipeStageError, naming after a failed
// transfer the stages that did not answer the roll call.
func (e *PipeEngine) runSteps(ctx context.Context, steps [][]pipeline.Instruction, data []model.MicroBatch,
	exec func(context.Context, pipeline.Instruction, []model.MicroBatch) (float64, error)) (float64, *PipeStageError) {
	var lossSum float64
	for t, step := range steps {
		for _, in := range step {
			t1 := time.Now()
			loss, err := exec(ctx, in, data)
			if err != nil {
				se := &PipeStageError{Stage: e.stage, Step: t, Instruction: in.String(), Err: err}
				if in.Op.IsComm() {
					se.Unresponsive = e.rollCall(ctx, time.Since(t1))
				}
				return 0, se
			}
			lossSum += loss
		}
	}
	return lossSum, nil
}

// agreeSchedule checks that every rank runs the same schedule over the
// same number of micro-batches before any point-to-point transfer, so a
// disagreement is an error naming the stages instead of a hang.
func (e *PipeEngine) agreeSchedule(ctx context.Context, n int, sizesOK bool) error {
	if n != e.batch.GradAccum {
		// still join the agreement: the others must learn of it
		n = -n
	}
	ok := int64(1)
	if !sizesOK {
		ok = 0
	}
	vals, err := comm.AllGatherInt64s(ctx, e.world, []int64{int64(n), ok})
	if err != nil {
		return fmt.Errorf("deepgo: pipeline stage %d: agreeing on the schedule%s: %w", e.stage, e.atFault(err), err)
	}
	for i := 0; i < len(vals); i += 2 { // rank i/2's (count, sizes ok)
		if vals[i+1] == 0 {
			return fmt.Errorf("deepgo: pipeline: stage %d (rank %d) was handed a micro-batch whose size is not train_micro_batch_size_per_gpu (%d); no stage started the batch",
				e.grid.CoordOf(i/2, comm.AxisPipe), i/2, e.batch.MicroBatch)
		}
	}
	for i := 0; i < len(vals); i += 2 {
		if r, v := i/2, vals[i]; v < 0 {
			return fmt.Errorf("deepgo: pipeline: stage %d (rank %d) was handed %d micro-batches, gradient_accumulation_steps is %d (TrainBatch takes exactly that many); no stage started the batch",
				e.grid.CoordOf(r, comm.AxisPipe), r, -v, e.batch.GradAccum)
		}
	}
	for i := 0; i < len(vals); i += 2 {
		r, v := i/2, vals[i]
		if v != vals[0] {
			return fmt.Errorf("deepgo: pipeline: ranks disagree on the schedule: stage %d (rank %d) has %d micro-batches, stage %d (rank %d) has %d micro-batches (this rank's gradient_accumulation_steps is %d)",
				e.grid.CoordOf(0, comm.AxisPipe), 0, abs64(vals[0]), e.grid.CoordOf(r, comm.AxisPipe), r, abs64(v), e.batch.GradAccum)
		}
	}
	return nil
}

// atFault names the stages of the world ranks a comm error on the world
// blames (those that did not arrive or failed), e.g. " (stage 1 at fault)".
func (e *PipeEngine) atFault(err error) string {
	var ce *comm.Error
	if !errors.As(err, &ce) || len(ce.Ranks) == 0 || ce.Group != e.world.Name() {
		return ""
	}
	var st []string
	for _, r := range ce.Ranks {
		if r >= 0 && r < e.grid.Size() {
			st = append(st, fmt.Sprintf("stage %d (rank %d)", e.grid.CoordOf(r, comm.AxisPipe), r))
		}
	}
	return " (" + strings.Join(st, ", ") + " at fault)"
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// meanLoss averages the last stage's mean loss over its data-parallel
// ranks and hands it to every rank.
func (e *PipeEngine) meanLoss(ctx context.Context, mine float64) (float64, error) {
	vals, err := comm.AllGatherInt64s(ctx, e.world, []int64{int64(math.Float64bits(mine))})
	if err != nil {
		return 0, fmt.Errorf("deepgo: pipeline stage %d: averaging the loss: %w", e.stage, err)
	}
	var sum float64
	var n int
	for r, b := range vals {
		if e.grid.CoordOf(r, comm.AxisPipe) == e.stages-1 {
			sum += math.Float64frombits(uint64(b))
			n++
		}
	}
	return sum / float64(n), nil
}

// isFirst and isLast say whether chunk c holds the model's first or last
// virtual stage.
func (e *PipeEngine) isFirst(c int) bool { return c == 0 && e.stage == 0 }
func (e *PipeEngine) isLast(c int) bool {
	return c == e.virtual-1 && e.stage == e.stages-1
}

// part returns the Part of buffer b of chunk c, making it on first use.
func (e *PipeEngine) part(c, b int) (model.Part, error) {
	if p := e.parts[c][b]; p != nil {
		return p, nil
	}
	lo, hi := e.partition.StageBounds(c*e.stages + e.stage)
	p, err := e.net.NewPart(lo, hi)
	if err != nil {
		return nil, err
	}
	e.parts[c][b] = p
	return p, nil
}

// prepare readies buffer b of chunk c for micro-batch mb (once per
// micro-batch): the part's activation memory and the receive buffer.
func (e *PipeEngine) prepare(ctx context.Context, c, b, mb int, data []model.MicroBatch) (*pipeBuffer, model.Part, error) {
	buf := e.bufs[c][b]
	p, err := e.part(c, b)
	if err != nil {
		return nil, nil, err
	}
	if buf.mb == mb {
		return buf, p, nil
	}
	if mb < 0 || mb >= len(data) {
		return nil, nil, fmt.Errorf("micro-batch %d of %d", mb, len(data))
	}
	in, err := p.Input(e.moduleCtx(ctx, buf), data[mb])
	if err != nil {
		return nil, nil, err
	}
	buf.mb, buf.in, buf.out, buf.gradOut, buf.gradIn, buf.lossDone = mb, in, nil, nil, nil, false
	return buf, p, nil
}

// busy is the time the stage has run forward and backward passes (the
// loss included), for IdleShares.
func (e *PipeEngine) busy() time.Duration { return e.timers.Forward + e.pt.total[ptBwd] }

// exec runs one instruction and returns the loss a last-stage forward
// computed (0 otherwise), timing it in its DeepSpeed timer when one wraps
// the whole instruction; after OptimizerStep the step's timer lines.
func (e *PipeEngine) exec(ctx context.Context, in pipeline.Instruction, data []model.MicroBatch) (float64, error) {
	pt, timed := pipeOpTimers[in.Op]
	if !timed {
		return e.execOp(ctx, in, data)
	}
	t0 := time.Now()
	loss, err := e.execOp(ctx, in, data)
	if err = syncForTimers(ctx, e.cfg, e.be, err); err != nil {
		return 0, err
	}
	e.pt.add(pt, time.Since(t0))
	if in.Op == pipeline.OptimizerStep {
		e.logTimers(pipeMicroLine, pipeGlobalLine)
	}
	return loss, nil
}

// execOp is exec's instruction.
func (e *PipeEngine) execOp(ctx context.Context, in pipeline.Instruction, data []model.MicroBatch) (float64, error) {
	c, b := in.Chunk, in.BufferID
	next, prev := (e.stage+1)%e.stages, (e.stage+e.stages-1)%e.stages
	switch in.Op {
	case pipeline.LoadMicroBatch:
		_, _, err := e.prepare(ctx, c, b, in.MicroBatch, data)
		return 0, err
	case pipeline.RecvActivation:
		buf, _, err := e.prepare(ctx, c, b, in.MicroBatch, data)
		if err != nil {
			return 0, err
		}
		if buf.in == nil {
			return 0, fmt.Errorf("chunk %d has no input to receive (it starts the model)", c)
		}
		return 0, e.p2p(ctx, false, buf.in, prev)
	case pipeline.SendActivation:
		t, ok := e.bufs[c][b].out.(*tensor.Tensor)
		if !ok {
			return 0, fmt.Errorf("the activation to send is %T, want *tensor.Tensor", e.bufs[c][b].out)
		}
		return 0, e.p2p(ctx, true, t, next)
	case pipeline.ForwardPass:
		return e.forward(ctx, c, b, in.MicroBatch, data, false)
	case pipeline.RecvGrad:
		buf := e.bufs[c][b]
		out, ok := buf.out.(*tensor.Tensor)
		if !ok {
			return 0, fmt.Errorf("no forward output of micro-batch %d to receive the gradient of", in.MicroBatch)
		}
		if buf.grad == nil || buf.grad.Numel() != out.Numel() || buf.grad.DType() != out.DType() {
			if buf.grad != nil {
				buf.grad.Free()
			}
			g, err := e.be.Empty(out.DType(), out.Shape()...)
			if err != nil {
				return 0, err
			}
			buf.grad = g
		}
		buf.gradOut = buf.grad
		return 0, e.p2p(ctx, false, buf.grad, next)
	case pipeline.BackwardPass:
		return 0, e.backward(ctx, c, b)
	case pipeline.SendGrad:
		buf := e.bufs[c][b]
		t, ok := buf.gradIn.(*tensor.Tensor)
		if !ok {
			return 0, fmt.Errorf("the input gradient to send is %T, want *tensor.Tensor", buf.gradIn)
		}
		err := e.p2p(ctx, true, t, prev)
		buf.arena.Close()
		return 0, err
	case pipeline.ReduceTiedGrads:
		return 0, e.reduceTied(ctx)
	case pipeline.ReduceGrads:
		return 0, nil // the ZeRO optimizer reduces at the step (Overflow)
	case pipeline.OptimizerStep:
		return 0, e.step(ctx)
	}
	return 0, fmt.Errorf("unknown instruction %v", in.Op)
}

// p2p sends t to, or receives it from, stage peer of this pipe.
func (e *PipeEngine) p2p(ctx context.Context, send bool, t *tensor.Tensor, peer int) error {
	t0 := time.Now()
	defer func() { e.timers.Comm += time.Since(t0) }()
	if send {
		if err := e.pipe.Send(ctx, t, peer); err != nil {
			return fmt.Errorf("sending to stage %d: %w", peer, err)
		}
		return nil
	}
	if err := e.pipe.Recv(ctx, t, peer); err != nil {
		return fmt.Errorf("receiving from stage %d: %w", peer, err)
	}
	return nil
}

// forward runs chunk c's modules on buffer b's micro-batch; on the last
// virtual stage it computes the loss and its gradient too. An evaluation's
// (eval) computes the loss unscaled and keeps no gradient: the last
// virtual stage frees the buffer's activations at once.
func (e *PipeEngine) forward(ctx context.Context, c, b, mb int, data []model.MicroBatch, eval bool) (float64, error) {
	buf, p, err := e.prepare(ctx, c, b, mb, data)
	if err != nil {
		return 0, err
	}
	buf.arena.Reset()
	buf.arena.Open()
	mctx := e.moduleCtx(ctx, buf)
	var act model.Activation = buf.in
	if e.isFirst(c) {
		act = data[mb].Input
	}
	seeMemory(e.log, e.mem, e.world.Rank(), "Engine before forward") // DeepSpeed's module hooks, in eval too
	t0 := time.Now()
	defer func() { e.timers.Forward += time.Since(t0) }()
	for i, m := range p.Modules() {
		t1 := time.Now()
		out, err := m.Forward(mctx, act)
		err = syncForTimers(ctx, e.cfg, e.be, err)
		if err != nil {
			return 0, fmt.Errorf("forward of module %q: %w", e.mods[e.chunks[c][i]].Name(), err)
		}
		e.flopsTime(mb, e.chunks[c][i], time.Since(t1))
		act = out
	}
	e.pt.add(ptFwd, time.Since(t0)) // the modules: DeepSpeed's fwd leaves out the loss
	// before the loss, as DeepSpeed's loss_fn runs after its module's hooks
	seeMemory(e.log, e.mem, e.world.Rank(), "Engine after forward")
	buf.out = act
	if !e.isLast(c) {
		return 0, nil
	}
	if eval {
		return e.evalLast(mctx, p, buf, act, mb, data)
	}
	scale := e.scaler.Scale() / float64(e.batch.GradAccum)
	loss, g, err := p.Loss(mctx, act, data[mb].Target, scale)
	if err != nil {
		return 0, fmt.Errorf("loss: %w", err)
	}
	buf.gradOut, buf.lossDone = g, true
	return loss, nil
}

// backward runs chunk c's modules backward on buffer b, accumulating the
// parameter gradients through the ZeRO optimizer's micro-step protocol.
func (e *PipeEngine) backward(ctx context.Context, c, b int) error {
	buf := e.bufs[c][b]
	if buf.gradOut == nil {
		return fmt.Errorf("no output gradient for micro-batch %d (no forward, or no RecvGrad)", buf.mb)
	}
	p, err := e.part(c, b)
	if err != nil {
		return err
	}
	seeMemory(e.log, e.mem, e.world.Rank(), "Engine before backward") // _backward_prologue (the output hook off the last stage)
	t0 := time.Now()
	defer func() { e.pt.add(ptBwd, time.Since(t0)) }()
	mctx := e.moduleCtx(ctx, buf)
	e.z.BeginMicroStep(e.chunks[c])
	mods := p.Modules()
	g := buf.gradOut
	tInner := time.Now()
	for i := len(mods) - 1; i >= 0; i-- {
		m := e.chunks[c][i]
		if err := e.z.PreBackward(ctx, m); err != nil {
			return err
		}
		e.bind(m)
		t1 := time.Now()
		gin, err := mods[i].Backward(mctx, g)
		err = syncForTimers(ctx, e.cfg, e.be, err)
		e.timers.Backward += time.Since(t1) // the modules' own, as the data-parallel engine's
		if err != nil {
			return fmt.Errorf("backward of module %q: %w", e.mods[m].Name(), err)
		}
		g = gin
		if err := e.z.PostBackward(ctx, m); err != nil {
			return err
		}
		e.bind(m)
	}
	if err := syncForTimers(ctx, e.cfg, e.be, nil); err != nil { // the last hook's work
		return err
	}
	e.pt.add(ptBwdInner, time.Since(tInner))
	buf.gradIn, buf.gradOut = g, nil
	tEnd := time.Now()
	err = syncForTimers(ctx, e.cfg, e.be, e.z.EndBackward(ctx))
	if err != nil {
		return err
	}
	e.pt.add(ptBwdAllreduce, time.Since(tEnd))
	if e.isFirst(c) {
		buf.arena.Close()
	}
	seeMemory(e.log, e.mem, e.world.Rank(), "Engine after backward") // _backward_epilogue's
	return nil
}

// bind points module m's Params at the optimizer's current buffers.
func (e *PipeEngine) bind(m int) {
	for j, p := range e.params[m] {
		p.Data, p.Grad = e.z.Data(m, j), e.z.Grad(m, j)
	}
	e.bindFrozen(m)
}
