package deepgo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
)

// The micro-step's phases: each micro-step is Forward, Backward, Step, and
// the engine refuses any other order that would change the numbers without
// a word (a second Backward's gradients counted in one step, a Step that
// decays the weights without a gradient).
const (
	phaseIdle     = iota // after Initialize or Step: Forward next
	phaseForward         // after Forward: Backward (or another Forward) next
	phaseBackward        // after Backward: Step next
)

// usable is the check at the top of every call that computes, communicates
// or reads engine memory: the engine is open, no earlier call stopped half
// way through a micro-step, no earlier Load stopped half way through
// restoring a checkpoint, and ctx is still live (a cancelled context must
// stop a call before it changes anything, on one rank as on many).
func (e *Engine) usable(ctx context.Context, op string) error {
	if err := e.loadable(ctx, op); err != nil {
		return err
	}
	if e.halfLoaded != nil {
		return errHalfLoaded(op, e.halfLoaded)
	}
	return nil
}

// loadable is usable less the mark of a Load that failed part way: the
// check at the top of Load, which such an engine still takes (a Load that
// succeeds installs a whole checkpoint and clears the mark). A failed
// micro-step still refuses Load: it may have left gradient reductions in
// flight and stage-3 gathers open, which a restore does not undo.
func (e *Engine) loadable(ctx context.Context, op string) error {
	if e.closed {
		return errClosed(op)
	}
	if e.broken != nil {
		return errBroken(op, "micro-step", e.broken)
	}
	if err := ctx.Err(); err != nil && e.alone() {
		return fmt.Errorf("deepgo: %s: %w", op, err)
	}
	return nil
}

// errBroken is op's refusal on an engine where an earlier call failed with
// cause part way through a unit of work (a micro-step; a pipeline's
// batch), leaving gradients and parameters in no known state.
func errBroken(op, unit string, cause error) error {
	return fmt.Errorf("deepgo: %s: an earlier call failed part way through a %s, so this Trainer's gradients and parameters are not in a known state; Close it and resume from a checkpoint (the failure: %w)", op, unit, cause)
}

// A Load that fails after it began changing the engine (from the restore
// of the optimizer state and master weights on: restoreZero, then the
// loss scaler, LR schedule and counters, then the comparison of the
// replicas across ranks) leaves it holding parts of two states, or ranks
// that disagree. Both engines then keep that Load's error (halfLoaded)
// and refuse every call but Load and Close (errHalfLoaded); a Load that
// succeeds has installed a whole checkpoint and clears it. While the mark
// stands, a Load that would keep part of the state as it is is refused
// before it reads anything (halfLoadedOpts, and Engine.prepareLoad for
// NonStrict parameters the checkpoint lacks).

// loadFailedPartWay is the error of a Load (who: "deepgo: Load") that
// failed with err after it began installing checkpoint tag.
func loadFailedPartWay(who, tag string, err error) error {
	return fmt.Errorf("%s: failed part way through restoring %s, after it had begun changing the engine, which refuses every call but Load and Close until a Load succeeds: %w", who, tag, err)
}

// errHalfLoaded is op's refusal on an engine whose last Load failed part
// way with cause.
func errHalfLoaded(op string, cause error) error {
	return fmt.Errorf("deepgo: %s: an earlier Load failed part way, after it had begun restoring a checkpoint, so this Trainer's parameters, optimizer state, loss scaler, LR schedule and step counters may come from two checkpoints or differ between ranks; a Load that succeeds makes it usable again (or Close it) (the failure: %w)", op, cause)
}

// halfLoadedOpts refuses, while cause (a Load that failed part way)
// stands, the options that keep part of the engine's state as it is:
// that part may be the failed Load's half.
func halfLoadedOpts(who string, opts LoadOptions, cause error) error {
	if cause == nil {
		return nil
	}
	var keep []string
	for _, o := range []struct {
		set  bool
		name string
	}{{opts.ModuleOnly, "ModuleOnly"}, {opts.SkipOptimizerStates, "SkipOptimizerStates"}, {opts.SkipLRSchedulerStates, "SkipLRSchedulerStates"}} {
		if o.set {
			keep = append(keep, o.name)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s: refused: an earlier Load failed part way, and what this Load would keep as it is may be that Load's half; load a whole checkpoint first (without ModuleOnly, SkipOptimizerStates or SkipLRSchedulerStates) (the failure: %w)", who, strings.Join(keep, ", "), cause)
}

// alone reports whether this engine has no group to talk to. With one,
// a cancelled context is left to the first collective, which stops too
// and says more: which rank failed, when that cancelled the others'.
func (e *Engine) alone() bool {
	return e.c.Size() == 1 && (e.tp == nil || e.tp.Size() == 1)
}

// fail records err, returned by a call after it began changing the
// micro-step's state, so that later calls refuse (usable) instead of
// training on half-reduced gradients. It returns err.
func (e *Engine) fail(err error) error {
	if err != nil && e.broken == nil {
		e.broken = err
	}
	return err
}

// liveParams maps each Param an open Engine trains to that engine: one
// model object handed to two ranks would have both write the same Params
// (a data race, and each rank's values overwritten by the other's).
var liveParams = struct {
	sync.Mutex
	m map[*model.Param]claim
}{m: map[*model.Param]claim{}}

type claim struct {
	e    *Engine
	rank int
}

// claim records p as trained by e, or says which open engine has it.
func (e *Engine) claim(p *model.Param) error {
	liveParams.Lock()
	defer liveParams.Unlock()
	if c, ok := liveParams.m[p]; ok && c.e != e {
		return fmt.Errorf("deepgo.Initialize: parameter %q is already trained by another open Trainer (rank %d): every rank needs a model instance of its own, and a Trainer must be closed before its model is handed to another", p.Name, c.rank)
	}
	liveParams.m[p] = claim{e, e.c.Rank()}
	e.claimed = append(e.claimed, p)
	return nil
}

// release forgets e's claims (Close).
func (e *Engine) release() {
	liveParams.Lock()
	defer liveParams.Unlock()
	for _, p := range e.claimed {
		if liveParams.m[p].e == e {
			delete(liveParams.m, p)
		}
	}
	e.claimed = nil
}

// configNotes turns the config's warnings (unknown keys, unresolved
// "auto", legacy spellings: config.Config.Warnings) into notes, so that a
// trainer that logs Notes shows them; a non-nil log (the default log of a
// Trainer built without WithLog) gets them too, as DeepSpeed logs its own,
// because a key that loads and does nothing must not pass unseen.
func configNotes(cfg *config.Config, log io.Writer) []string {
	var notes []string
	for _, w := range cfg.Warnings {
		n := fmt.Sprintf("config warning: %v", w)
		notes = append(notes, n)
		if log != nil {
			fmt.Fprintln(log, "deepgo:", n)
		}
	}
	return notes
}
