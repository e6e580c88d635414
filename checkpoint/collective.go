package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
)

// agree is comm.Agree in the checkpoint's words: every rank gets nil only
// if every rank succeeded at phase, else the same *comm.RankError, read
// "checkpoint: write <tag> failed on rank 1: ...".
func agree(ctx context.Context, c comm.Comm, phase string, err error) error {
	if err := comm.Agree(ctx, c, phase, err); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// AgreeTag is a collective that checks every rank passes the same tag,
// like DeepSpeed's tag validation (but always fatal). It returns a
// *comm.MismatchError on every rank when they differ, and a comm error
// (within the group's timeout) when some rank does not take part.
func AgreeTag(ctx context.Context, c comm.Comm, tag string) error {
	err := comm.AgreeString(ctx, c, "tag", tag)
	var me *comm.MismatchError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &me):
		return fmt.Errorf("checkpoint: %w", err)
	}
	return fmt.Errorf("checkpoint: agreeing on tag %q (did every rank call save?): %w", tag, err)
}
