package zero

import (
	"context"

	"github.com/deepgo-ml/deepgo/comm"
)

// wait waits for an operation the Optimizer started until it ends, and
// returns its own outcome. comm.Work.Wait(ctx) would give up when ctx ends
// and leave the operation running; the Optimizer never abandons one (it
// would free or reuse buffers the operation still writes), and it starts
// its operations under the ctx of the engine call, so an ended ctx ends
// them at once (the group's timeout bounds them in any case). The
// operation's outcome is also the error that says what happened: when a
// rank fails, local.Run (like a launcher) aborts the group, which fails the
// operation naming that rank, and only then cancels the other ranks' ctx,
// whose error names no one. An operation that completed before ctx ended
// succeeded; the next one reports the abort or the cancellation.
func wait(w comm.Work) error { return w.Wait(context.Background()) }
