package comm

import (
	"context"
	"fmt"
)

// WaitDone is the Wait of the backends' Work: once done is closed it
// returns result(), the operation's outcome. If ctx ends first it returns
// an *Error for op on group (reported by rank) wrapping ctx.Err(), and
// leaves the operation running under its own deadline, so that it may be
// waited for again. An operation already over reports its outcome even
// when ctx has ended too.
func WaitDone(ctx context.Context, done <-chan struct{}, result func() error, op OpKind, group string, rank int) error {
	select {
	case <-done:
		return result()
	default:
	}
	select {
	case <-done:
		return result()
	case <-ctx.Done():
		return &Error{Op: op.String(), Group: group, Rank: rank,
			Err: fmt.Errorf("Wait gave up, the operation continues: %w", ctx.Err())}
	}
}
