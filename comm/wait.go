package comm

import (
	"context"
	"fmt"
	"time"
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

// CallerBinds reports whether ctx's own deadline comes no later than the
// group's timeout from now: a backend that waits under min(both) checks it
// when it starts a call, so that when the wait runs out it can say whose
// deadline that was (NotJoined).
func CallerBinds(ctx context.Context, timeout time.Duration) bool {
	d, ok := ctx.Deadline()
	return ok && !d.After(time.Now().Add(timeout))
}

// NotJoined is the error of a call that stopped waiting after waited with
// ranks (as the backend names them) not joined. callerBinds (CallerBinds at
// the call's start) tells the caller's context deadline from the group's
// timeout: only the first wraps context.DeadlineExceeded, and neither
// blames the ranks for more than being late. cause, when not nil, is
// wrapped too (a backend's own failure).
func NotJoined(callerBinds bool, waited time.Duration, ranks string, cause error) error {
	waited = waited.Round(time.Millisecond)
	var err error
	if callerBinds {
		err = fmt.Errorf("%w: the caller's context deadline passed after %v, before ranks %s joined: %w",
			ErrTimeout, waited, ranks, context.DeadlineExceeded)
	} else {
		err = fmt.Errorf("%w after %v: ranks %s never joined", ErrTimeout, waited, ranks)
	}
	if cause != nil {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return err
}
