package deepgo

// Evaluation on the data-parallel engine (Trainer.EvalBatch): forward
// passes with no gradient, each micro-batch's activations freed as soon
// as its loss is known, and the mean loss over the micro-batches and the
// ranks.

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/monitor"
)

// EvalBatch runs the forward pass over data, one or more micro-batches of
// this rank, with no gradient, and returns the mean loss over the
// micro-batches and the data-parallel ranks, the same on every rank (see
// Trainer.EvalBatch). It may come between any two micro-steps (a Forward
// not followed by Backward is dropped, as another Forward drops it), but
// not between a Backward and its Step. It is Evaluate with no options.
func (e *Engine) EvalBatch(ctx context.Context, data []model.MicroBatch) (float64, error) {
	res, err := e.evaluate(ctx, "EvalBatch", data, EvalOptions{})
	return res.Loss, err
}

// Evaluate is EvalBatch returning what opts asks for besides the mean
// loss: each micro-batch's output of the last module, its loss (see
// Trainer.Evaluate).
func (e *Engine) Evaluate(ctx context.Context, data []model.MicroBatch, opts EvalOptions) (EvalResult, error) {
	return e.evaluate(ctx, "Evaluate", data, opts)
}

// evaluate is EvalBatch and Evaluate (op: which, for the errors).
func (e *Engine) evaluate(ctx context.Context, op string, data []model.MicroBatch, opts EvalOptions) (EvalResult, error) {
	if err := e.usable(ctx, op); err != nil {
		return EvalResult{}, err
	}
	who := "deepgo: " + op
	if e.phase == phaseBackward {
		return EvalResult{}, fmt.Errorf("%s: the last micro-step's Backward was not followed by Step: call Step first", who)
	}
	ctx = e.devCtx(ctx)
	if err := agreeEval(ctx, who, data, e.batch.MicroBatch, opts, e.c, e.tp); err != nil {
		return EvalResult{}, err
	}
	// what a Forward never followed by Backward left goes (evalForward
	// resets the arena and checkpointing), as at a Forward
	e.seq, e.gradOut = nil, nil
	e.phase = phaseIdle
	timers := e.timers
	var ckStats CheckpointStats
	var ckPeak int64
	if e.ck != nil {
		ckStats, ckPeak = e.ck.stats, e.ck.peakSaved
	}
	run := newEvalRun(opts, len(data))
	defer run.free() // a failure's outputs; the result takes them otherwise
	e.z.BeginEval()
	var sum float64
	for i, mb := range data {
		loss, err := e.evalForward(ctx, op, run, i, mb)
		if err != nil {
			return EvalResult{}, e.fail(fmt.Errorf("%s: micro-batch %d: %w", who, i, err))
		}
		run.losses[i] = loss
		sum += loss
	}
	if err := e.z.EndEval(ctx); err != nil {
		return EvalResult{}, e.fail(fmt.Errorf("%s: %w", who, err))
	}
	// the timers and checkpointing's counters are the training's
	e.timers = timers
	if e.ck != nil {
		e.ck.stats, e.ck.peakSaved = ckStats, ckPeak
	}
	if opts.NoLoss {
		return run.result(0, nil), nil
	}
	loss, err := e.allMean(ctx, sum/float64(len(data)))
	if err != nil {
		return EvalResult{}, e.fail(fmt.Errorf("%s: %w", who, err))
	}
	return run.result(loss, run.losses), observeEval(e.mon, e.globalSteps, loss, who)
}

// observeEval hands an evaluation's loss after step optimizer steps to
// both engines' monitor m (nil: none), which writes
// Train/Samples/eval_loss on rank 0; a writer's error is returned with
// who's prefix, the loss being valid all the same.
func observeEval(m *monitor.Monitor, step int, loss float64, who string) error {
	if m == nil {
		return nil
	}
	if err := m.ObserveEval(step, loss); err != nil {
		return fmt.Errorf("%s: monitor: %w", who, err)
	}
	return nil
}

// evalForward runs mb, micro-batch i, forward through the model's
// modules as Forward does (stage 3 gathering each module, checkpointed
// segments in their scratch arenas), hands the last module's output to
// run and computes its loss (none under NoLoss: 0), then frees every
// activation of the micro-step.
func (e *Engine) evalForward(ctx context.Context, op string, run *evalRun, i int, mb model.MicroBatch) (float64, error) {
	mods, seq, err := e.sequence(op)
	if err != nil {
		return 0, err
	}
	if e.checkSeq {
		if err := e.checkSequence(ctx, seq); err != nil {
			return 0, err
		}
	}
	e.arena.Reset()
	e.arena.Open()
	defer e.arena.Close()
	if e.ck != nil {
		defer e.ck.reset()
	}
	mctx, err := e.planForward(ctx, mods)
	if err != nil {
		return 0, err
	}
	e.z.BeginMicroStep(seq)
	e.seeMemory("Engine before forward") // DeepSpeed's forward hooks run in eval mode too
	act, err := e.forwardModules(ctx, mctx, seq, mb.Input)
	if err != nil {
		return 0, err
	}
	if err := run.record(e.be, i, act); err != nil {
		return 0, err
	}
	if run.opts.NoLoss {
		return 0, nil
	}
	// no loss scale: the gradient Loss returns is dropped
	loss, _, err := e.model.Loss(mctx, act, mb.Target, 1)
	if err != nil {
		return 0, fmt.Errorf("loss: %w", err)
	}
	e.seeMemory("Engine after forward")
	return loss, nil
}

// checkEvalData is this rank's refusal of data for EvalBatch (who: the
// error's prefix), nil when it holds at least one micro-batch and each
// model.Sized input has micro samples (train_micro_batch_size_per_gpu).
func checkEvalData(who string, data []model.MicroBatch, micro int) error {
	if len(data) == 0 {
		return fmt.Errorf("%s: no micro-batches: want at least one", who)
	}
	for i, mb := range data {
		if s, ok := mb.Input.(model.Sized); ok && s.BatchSize() != micro {
			return fmt.Errorf("%s: micro-batch %d holds %d samples, train_micro_batch_size_per_gpu is %d: every micro-batch must have that size", who, i, s.BatchSize(), micro)
		}
	}
	return nil
}

// agreeEval checks opts and data on this rank (EvalOptions.check,
// checkEvalData; who prefixes the errors) and agrees with the other ranks of each group (those of size 1
// and nil skipped) on it and on opts before any forward: every rank learns
// of a rank's refused data, of ranks handed different numbers of
// micro-batches or different options (whose collectives would not pair
// up), and returns an error naming the rank, instead of waiting out the
// group's timeout. A collective per group (three numbers).
func agreeEval(ctx context.Context, who string, data []model.MicroBatch, micro int, opts EvalOptions, groups ...comm.Comm) error {
	ok := int64(1)
	mine := opts.check(who)
	if mine != nil {
		ok = -1
	} else if mine = checkEvalData(who, data, micro); mine != nil {
		ok = 0
	}
	for _, g := range groups {
		if g == nil || g.Size() == 1 {
			continue
		}
		vals, err := comm.AllGatherInt64s(ctx, g, []int64{int64(len(data)), ok, opts.word()})
		if err != nil {
			return fmt.Errorf("%s: agreeing on the micro-batches over group %s: %w", who, g.Name(), err)
		}
		if mine != nil {
			return mine
		}
		for r := 0; r < len(vals); r += 3 {
			if vals[r+1] < 0 {
				return fmt.Errorf("%s: rank %d of group %s was handed EvalOptions it refuses (%s); no rank started the evaluation", who, r/3, g.Name(), optsString(vals[r+2]))
			}
			if vals[r+1] == 0 {
				return fmt.Errorf("%s: rank %d of group %s was handed no micro-batch or one whose size is not train_micro_batch_size_per_gpu (%d); no rank started the evaluation", who, r/3, g.Name(), micro)
			}
		}
		for r := 0; r < len(vals); r += 3 {
			if vals[r] != vals[0] {
				return fmt.Errorf("%s: the ranks of group %s were handed different numbers of micro-batches: rank 0 %d, rank %d %d; every rank must evaluate as many; no rank started the evaluation", who, g.Name(), vals[0], r/3, vals[r])
			}
			if vals[r+2] != vals[2] {
				return fmt.Errorf("%s: the ranks of group %s were handed different EvalOptions: rank 0 %s, rank %d %s; every rank must pass the same; no rank started the evaluation", who, g.Name(), optsString(vals[2]), r/3, optsString(vals[r+2]))
			}
		}
	}
	return mine
}
