package deepgo

// The pipeline engine's batch boundary (tied-gradient reduction, overflow
// agreed over every stage, the global norm over every stage, the step) and
// the rest of the Trainer interface.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/deepgo-ml/deepgo/zero"
)

// reduceTied sums each tied weight's accumulated gradient over the stages
// holding it (DeepSpeed's allreduce_tied_weight_gradients), before the
// data-parallel reduction, so every copy steps with the same gradient.
func (e *PipeEngine) reduceTied(ctx context.Context) error {
	for _, t := range e.tied {
		g, err := e.z.AccumGrad(t.m, t.p)
		if err != nil {
			return err
		}
		t0 := time.Now()
		err = t.group.AllReduce(ctx, g, comm.Sum)
		e.timers.Comm += time.Since(t0)
		if err != nil {
			return fmt.Errorf("summing the gradient of tied weight %s: %w", t.name, err)
		}
	}
	return nil
}

// step closes the batch: the data-parallel reduction and overflow check
// (ZeRO), the overflow agreed over the pipe, the loss scale update, and
// either a skipped step or one clipped by the norm over every stage.
func (e *PipeEngine) step(ctx context.Context) error {
	t0 := time.Now()
	defer func() { e.timers.Step += time.Since(t0) }()
	scale := e.scaler.Scale()
	overflow, err := e.z.Overflow(ctx)
	if err != nil {
		return err
	}
	if overflow, err = e.anyStage(ctx, overflow); err != nil {
		return err
	}
	if err := e.scaler.Update(overflow); err != nil {
		return fmt.Errorf("step %d: %w", e.globalSteps, err)
	}
	e.globalSteps++
	if overflow {
		e.skippedSteps++
		return e.z.ZeroGrad()
	}
	norm, err := e.globalNorm(ctx)
	if err != nil {
		return err
	}
	if err := applyScheduleBetas(e.z, e.opt, e.lrs); err != nil {
		return err
	}
	if err := e.z.Step(ctx, e.LR(), optim.CombinedScale(norm, scale, e.clip)); err != nil {
		return err
	}
	e.gradNorm = norm / scale
	if e.lrs != nil {
		e.lrs.Step()
	}
	for m := range e.params {
		e.bind(m)
	}
	return nil
}

// anyStage is true on every rank when it is true on any stage (the data
// ranks of a stage agree already) or, under TP, on any TP rank.
func (e *PipeEngine) anyStage(ctx context.Context, v bool) (bool, error) {
	var x int64
	if v {
		x = 1
	}
	over := e.pipe
	if e.tp != nil {
		over = e.world // each TP rank checked only its shards
	}
	vals, err := comm.AllGatherInt64s(ctx, over, []int64{x})
	if err != nil {
		return false, fmt.Errorf("agreeing on overflow over the stages: %w", err)
	}
	return slices.Contains(vals, 1), nil
}

// globalNorm is the L2 norm of the (loss-scaled) reduced gradients of the
// whole model: every stage's share, a tied weight counted once (on its
// owner), each data-parallel shard once, under TP each TP shard once and
// the replicated parameters once (pipe_tp.go), summed in world-rank order.
func (e *PipeEngine) globalNorm(ctx context.Context) (float64, error) {
	skip := func(m, p int) bool {
		for _, t := range e.tied {
			if t.m == m && t.p == p && !t.owner {
				return true
			}
		}
		return false
	}
	ss, err := e.z.OwnedSumSquares(skip)
	if e.tp != nil {
		ss, err = e.tpShardNorm(skip)
	}
	if err != nil {
		return 0, err
	}
	if e.cfg.ZeroOptimization.Stage == 0 && e.data.Rank() != 0 {
		ss = 0 // stage 0: every data rank holds the whole reduced gradient
	}
	vals, err := comm.AllGatherInt64s(ctx, e.world, []int64{int64(math.Float64bits(ss))})
	if err != nil {
		return 0, fmt.Errorf("global gradient norm: %w", err)
	}
	var sum float64
	for _, b := range vals {
		sum += math.Float64frombits(uint64(b))
	}
	return math.Sqrt(sum), nil
}

// errTrainBatchOnly is DeepSpeed's PipelineEngine's rule: the pipeline runs
// whole batches.
func errTrainBatchOnly(method string) error {
	return fmt.Errorf("deepgo: pipeline engine: %s: not supported: a pipeline runs whole batches, use TrainBatch (DeepSpeed's PipelineEngine allows only train_batch)", method)
}

// Forward is not supported: use TrainBatch.
func (e *PipeEngine) Forward(context.Context, model.MicroBatch) (float64, error) {
	return 0, errTrainBatchOnly("Forward")
}

// Backward is not supported: use TrainBatch.
func (e *PipeEngine) Backward(context.Context) error { return errTrainBatchOnly("Backward") }

// Step is not supported: use TrainBatch.
func (e *PipeEngine) Step(context.Context) error { return errTrainBatchOnly("Step") }

// Parameters gathers the whole model's fp32 parameters keyed by name on
// every rank (a collective over all ranks); a tied weight comes from its
// owner stage. Under tensor parallelism they are this TP rank's shards
// (nn.GPT.Unshard gathers them).
func (e *PipeEngine) Parameters(ctx context.Context) (map[string][]float32, error) {
	if err := e.openCheck("Parameters"); err != nil {
		return nil, err
	}
	ctx = e.devCtx(ctx)
	all, err := e.z.GatherMaster(ctx)
	if err != nil {
		return nil, err
	}
	var mine []byte
	for m, ps := range e.params {
		for j, p := range ps {
			if e.isTiedCopy(m, j) {
				continue
			}
			mine = appendNamedFloats(mine, p.Name, all[m][j])
		}
	}
	if mine, err = e.frozenParameters(mine); err != nil {
		return nil, err
	}
	got, err := comm.AllGatherBytes(ctx, e.pipe, mine)
	if err != nil {
		return nil, fmt.Errorf("deepgo: pipeline stage %d: gathering parameters: %w", e.stage, err)
	}
	out := map[string][]float32{}
	for _, b := range got {
		for len(b) > 0 {
			n := int(binary.LittleEndian.Uint32(b))
			name := string(b[4 : 4+n])
			b = b[4+n:]
			k := int(binary.LittleEndian.Uint32(b))
			v := make([]float32, k)
			for i := range v {
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4+4*i:]))
			}
			b = b[4+4*k:]
			out[name] = v
		}
	}
	return out, nil
}

func (e *PipeEngine) isTiedCopy(m, p int) bool {
	for _, t := range e.tied {
		if t.m == m && t.p == p {
			return !t.owner
		}
	}
	return false
}

// TiedCopies returns this stage's tied weights as their fp32 master values
// keyed by name (a collective over the stage's data-parallel group), for
// checking that the stages' copies stay identical; a frozen one
// (model.Param.Frozen) as its working value widened to float32.
func (e *PipeEngine) TiedCopies(ctx context.Context) (map[string][]float32, error) {
	if err := e.openCheck("TiedCopies"); err != nil {
		return nil, err
	}
	all, err := e.z.GatherMaster(e.devCtx(ctx))
	if err != nil {
		return nil, err
	}
	out := map[string][]float32{}
	for _, t := range e.tied {
		out[t.name] = all[t.m][t.p]
	}
	return out, e.tiedFrozen(out)
}

// BatchSizes is the resolved batch triad (data-parallel size dp = world/pp).
func (e *PipeEngine) BatchSizes() config.BatchSizes { return e.batch }

// GlobalSteps counts optimizer steps, skipped ones included.
func (e *PipeEngine) GlobalSteps() int { return e.globalSteps }

// SkippedSteps counts steps skipped for inf/nan gradients on any stage.
func (e *PipeEngine) SkippedSteps() int { return e.skippedSteps }

// GradNorm is the unscaled global gradient norm of the last applied step.
func (e *PipeEngine) GradNorm() float64 { return e.gradNorm }

// LR is the learning rate the next optimizer step uses (see Trainer.LR).
func (e *PipeEngine) LR() float64 {
	switch {
	case e.lrs != nil:
		return e.lrs.LR()[0]
	case e.opt == nil: // closed
		return e.lrAtClose
	}
	return e.opt.Defaults().LR
}

// LossScale is the current loss scale (1 without fp16).
func (e *PipeEngine) LossScale() float64 { return e.scaler.Scale() }

// Memory reports this rank's model-state bytes (the stage's ZeRO buffers),
// as Arena the engine's arenas live and at their peak, and as
// ModelActivations the activation memory of the stage's parts
// (ActivationBytes).
func (e *PipeEngine) Memory() zero.Memory {
	if e.z == nil { // closed
		return zero.Memory{}
	}
	m := e.z.Memory()
	for c := range e.bufs {
		for b := range e.bufs[c] {
			m.Arena += e.bufs[c][b].arena.Bytes()
			m.ArenaPeak += e.bufs[c][b].arena.Peak()
		}
	}
	m.ModelActivations = e.ActivationBytes()
	countLive(&m, m.Arena+m.ModelActivations)
	e.frozenMemory(&m)
	return m
}

// ActivationBytes sums the activation memory of the stage's parts that
// report theirs (nn.GPT's do): one part per pipeline buffer in use, so
// under 1F1B at most the pipeline depth, under GPipe every micro-batch.
func (e *PipeEngine) ActivationBytes() int64 {
	var n int64
	for c := range e.parts {
		for _, p := range e.parts[c] {
			if a, ok := p.(interface{ ActivationBytes() int64 }); ok {
				n += a.ActivationBytes()
			}
		}
	}
	return n
}

// PartsMade is the number of parts (pipeline buffers with activation
// memory) the stage has made: the micro-batches it has held at once.
func (e *PipeEngine) PartsMade() int {
	n := 0
	for c := range e.parts {
		for _, p := range e.parts[c] {
			if p != nil {
				n++
			}
		}
	}
	return n
}

// IdleShares lists, per TrainBatch (the latest 1024), the share of the wall time of
// its schedule in which this stage ran no forward or backward pass (it
// waited on its neighbours, transferred, or stepped): the measured
// pipeline bubble. On a device a pass's time is its kernels' only when
// wall_clock_breakdown (or flops_profiler) makes the timers synchronize;
// otherwise it is the time to queue them, and the rest counts as idle.
func (e *PipeEngine) IdleShares() []float64 { return slices.Clone(e.idle) }

// Timers returns the cumulative time split, as the data-parallel
// engine's: Forward the stage's module forwards and the loss, Backward its
// module backwards (ZeRO hooks excluded), Comm its transfers, the
// tied-weight all-reduce and the ZeRO optimizer's collectives, Reduce and
// Optimizer the optimizer's bucket work and step, Step the whole
// OptimizerStep. PipeTimers has DeepSpeed's PipelineEngine timers.
func (e *PipeEngine) Timers() Timers {
	t := e.timers
	if e.z == nil { // closed
		return t
	}
	zt := e.z.Timers()
	t.Comm += zt.Comm
	t.Reduce, t.Optimizer = zt.Reduce, zt.Optimizer
	return t
}

// Notes lists what the engine did differently from what the config's
// words alone suggest.
func (e *PipeEngine) Notes() []string { return slices.Clone(e.notes) }

// devCtx is ctx carrying the engine's backend.
func (e *PipeEngine) devCtx(ctx context.Context) context.Context {
	if b, ok := backend.FromContext(ctx); ok && b == e.be {
		return ctx
	}
	return backend.NewContext(ctx, e.be)
}

// moduleCtx is ctx carrying the backend and buffer's arena.
func (e *PipeEngine) moduleCtx(ctx context.Context, buf *pipeBuffer) context.Context {
	return tensor.WithArena(e.devCtx(ctx), &buf.arena)
}

// appendNamedFloats appends name and v to b as Parameters exchanges them:
// the name's length and bytes, v's length and float32 bits, little-endian.
func appendNamedFloats(b []byte, name string, v []float32) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(name)))
	b = append(b, name...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}
