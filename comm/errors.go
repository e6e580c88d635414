package comm

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors; an *Error wraps exactly one of them (test with errors.Is).
var (
	// ErrTimeout: the deadline passed before every rank joined the operation.
	ErrTimeout = errors.New("timed out")
	// ErrAborted: another rank failed (returned an error, panicked, cancelled
	// its call), the world was aborted, or the group broke earlier.
	ErrAborted = errors.New("aborted")
	// ErrMismatch: ranks made different calls (operation, dtype, element
	// count, root or operator) at the same point of the sequence, or
	// disagree on a configuration (AgreeOnConfig) or a value (AgreeString,
	// whose *MismatchError wraps it).
	ErrMismatch = errors.New("mismatched calls")
	// ErrInvalid: a bad argument on the calling rank.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnsupported: an operator or dtype the backend does not provide.
	ErrUnsupported = errors.New("not supported")
	// ErrClosed: the handle was closed.
	ErrClosed = errors.New("closed")
	// ErrRefused: the rendezvous store refused: a wrong or missing job
	// secret, a limit reached, or a write-once key written again.
	ErrRefused = errors.New("refused")
)

// Error is a failed operation on a group, as seen by one rank.
type Error struct {
	Op    string // the operation, e.g. "AllReduce"
	Group string // the group's name, e.g. "data[pipe=0,model=1]"
	Rank  int    // the rank reporting, in the group
	// Ranks are the group ranks at fault: those that did not arrive (timeout),
	// called something else (mismatch), or failed (aborted). May be empty.
	Ranks []int
	Err   error // wraps a sentinel, with the details
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "comm: %s on group %s (rank %d)", e.Op, e.Group, e.Rank)
	if len(e.Ranks) > 0 {
		fmt.Fprintf(&b, ", ranks %v", e.Ranks)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }
