package zero

import "context"

// BeginEval starts an evaluation: micro-steps of BeginMicroStep,
// PreForward and PostForward only, which no backward follows and which
// touch no gradient. Stage 3 gathers each module for its forward as in
// training, prefetching along the recorded trace while the forward follows
// it, but neither records nor invalidates the trace (Coordinator.BeginEval).
// EndEval ends it.
func (z *Optimizer) BeginEval() {
	if z.coord != nil {
		z.coord.BeginEval()
	}
	z.evalTimers = z.timers
}

// EndEval ends an evaluation: stage 3 releases every module it left
// gathered (the persistent ones stay) and gets its trace back, and the
// timers are set back to what BeginEval found, so that Timers keeps
// counting the training's time only.
func (z *Optimizer) EndEval(ctx context.Context) error {
	defer func() { z.timers = z.evalTimers }()
	if z.coord == nil {
		return nil
	}
	return z.execute(ctx, z.coord.EndEval())
}
