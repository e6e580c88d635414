package deepgo

import (
	"context"
	"fmt"
	"io"
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
// way through a micro-step, and ctx is still live (a cancelled context must
// stop a call before it changes anything, on one rank as on many).
func (e *Engine) usable(ctx context.Context, op string) error {
	if e.closed {
		return fmt.Errorf("deepgo: %s: the Trainer is closed", op)
	}
	if e.broken != nil {
		return fmt.Errorf("deepgo: %s: an earlier call failed part way through a micro-step, so this Trainer's gradients and parameters are not in a known state; Close it and resume from a checkpoint (the failure: %w)", op, e.broken)
	}
	if err := ctx.Err(); err != nil && e.alone() {
		return fmt.Errorf("deepgo: %s: %w", op, err)
	}
	return nil
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
