package local

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// faultDeadline is the operation timeout of the tests in which ranks wait
// for a deadline to pass; they check that nobody gives up before it.
const faultDeadline = 300 * time.Millisecond

// noDeadline is the operation timeout of the tests in which no rank should
// wait for a deadline: one that did would take far longer than reportBound.
const noDeadline = time.Minute

// reportBound is how long after its deadline, or after the failure that
// decides its outcome, a rank may take to return: room for a loaded
// two-core machine under -race, and still far below noDeadline.
const reportBound = 10 * time.Second

// wantErr checks that err is an *comm.Error wrapping sentinel, for op,
// blaming exactly ranks, returned by elapsed <= faultDeadline+reportBound.
func wantErr(t *testing.T, who string, err error, sentinel error, op string, ranks []int, elapsed time.Duration) {
	t.Helper()
	var ce *comm.Error
	require.Error(t, err, "%s: no error, want %v", who, sentinel)
	require.ErrorAs(t, err, &ce, "%s: %T is not a *comm.Error", who, err)
	require.ErrorIs(t, err, sentinel, who)
	require.Equal(t, op, ce.Op, "%s: %v: Op", who, err)
	if ranks != nil {
		require.Equal(t, fmt.Sprint(ranks), fmt.Sprint(ce.Ranks), "%s: %v: Ranks", who, err)
	}
	require.LessOrEqual(t, elapsed, faultDeadline+reportBound, "%s: returned too late", who)
}

// waitUntil polls cond until it holds, and reports false if it still does
// not after a minute. Tests order ranks with it, on the group's own state,
// instead of sleeping and hoping the others got there first.
func waitUntil(cond func() bool) bool {
	for end := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// blocked counts the calls waiting in c's group for their other parties.
func blocked(c comm.Comm) int {
	g := c.(*rankComm).g
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, s := range g.slots {
		n += s.nposted
	}
	return n
}

// waitBlocked waits until n calls wait in c's group.
func waitBlocked(c comm.Comm, n int) error {
	if !waitUntil(func() bool { return blocked(c) == n }) {
		return fmt.Errorf("%d calls blocked in %s after a minute, want %d", blocked(c), c.Name(), n)
	}
	return nil
}

// broken reports whether c's group has failed.
func broken(c comm.Comm) bool {
	g := c.(*rankComm).g
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.brokenLocked() != nil
}

type result struct {
	err     error
	elapsed time.Duration
}

// onAllTimed runs fn on every rank and times each.
func onAllTimed(cs []comm.Comm, fn func(c comm.Comm) error) []result {
	start := time.Now()
	res := make([]result, len(cs))
	errs := onAll(cs, func(c comm.Comm) error {
		err := fn(c)
		res[c.Rank()].elapsed = time.Since(start)
		return err
	})
	for i := range res {
		res[i].err = errs[i]
	}
	return res
}

func floats(t *testing.T, n, length int) []*tensor.Tensor {
	out := make([]*tensor.Tensor, n)
	for i := range out {
		out[i] = newTensor(t, tensor.Float32, length)
	}
	return out
}

func TestFaultRankSleepsPastDeadline(t *testing.T) {
	const n, sleeper = 4, 3
	w := newWorld(t, n, faultDeadline)
	bufs := floats(t, n, 100)
	var late time.Duration // how long the sleeper's own call took
	res := onAllTimed(w.Comms(), func(c comm.Comm) error {
		if c.Rank() == sleeper {
			// It arrives only once the others have given up on it.
			if !waitUntil(func() bool { return broken(c) }) {
				return errors.New("the others never gave up")
			}
			start := time.Now()
			defer func() { late = time.Since(start) }()
		}
		return c.AllReduce(ctxBG, bufs[c.Rank()], comm.Sum)
	})
	for r, x := range res {
		if r == sleeper {
			// It arrives to a group broken by its own absence.
			wantErr(t, "sleeper", x.err, comm.ErrAborted, "AllReduce", []int{sleeper}, late)
			require.ErrorIs(t, x.err, comm.ErrTimeout, "sleeper: does not carry the original timeout")
			continue
		}
		wantErr(t, fmt.Sprint("rank ", r), x.err, comm.ErrTimeout, "AllReduce", []int{sleeper}, x.elapsed)
		require.GreaterOrEqual(t, x.elapsed, faultDeadline, "rank %d gave up before the deadline", r)
	}
	// The group stays broken: later calls fail at once. One that waited
	// instead would time out blaming ranks 1-3, which never call.
	start := time.Now()
	err := w.Comm(0).Barrier(ctxBG)
	wantErr(t, "later call", err, comm.ErrAborted, "Barrier", []int{sleeper}, time.Since(start))
	require.ErrorContains(t, err, "group broken by an earlier failure", "later call: does not say the group broke earlier")
}

func TestFaultRankError(t *testing.T) {
	const n, bad = 4, 2
	w := newWorld(t, n, noDeadline)
	bufs := floats(t, n, 100)
	wrong := newTensor(t, tensor.Uint8, 100) // no reductions over uint8
	res := onAllTimed(w.Comms(), func(c comm.Comm) error {
		if c.Rank() == bad {
			if err := waitBlocked(c, n-1); err != nil { // the others block first
				return err
			}
			return c.AllReduce(ctxBG, wrong, comm.Sum)
		}
		return c.AllReduce(ctxBG, bufs[c.Rank()], comm.Sum)
	})
	for r, x := range res {
		if r == bad {
			wantErr(t, "bad rank", x.err, comm.ErrUnsupported, "AllReduce", nil, x.elapsed)
			continue
		}
		// Waiting for the failed rank would take noDeadline.
		wantErr(t, fmt.Sprint("rank ", r), x.err, comm.ErrAborted, "AllReduce", []int{bad}, x.elapsed)
	}
}

func TestFaultMismatch(t *testing.T) {
	cases := []struct {
		name string
		odd  func(c comm.Comm, x *tensor.Tensor) error
	}{
		{"other op", func(c comm.Comm, x *tensor.Tensor) error { return c.Broadcast(ctxBG, x, 0) }},
		{"other size", func(c comm.Comm, x *tensor.Tensor) error {
			y, _ := x.Slice(0, 99)
			return c.AllReduce(ctxBG, y, comm.Sum)
		}},
		{"other reduce op", func(c comm.Comm, x *tensor.Tensor) error { return c.AllReduce(ctxBG, x, comm.Max) }},
		{"other dtype", func(c comm.Comm, x *tensor.Tensor) error {
			y, _ := tensor.FromStorage(x.Storage(), tensor.BFloat16, 0, 100)
			return c.AllReduce(ctxBG, y, comm.Sum)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const n, odd = 4, 1
			w := newWorld(t, n, noDeadline)
			bufs := floats(t, n, 100)
			res := onAllTimed(w.Comms(), func(c comm.Comm) error {
				if c.Rank() == odd {
					return tc.odd(c, bufs[odd])
				}
				return c.AllReduce(ctxBG, bufs[c.Rank()], comm.Sum)
			})
			for r, x := range res {
				op := "AllReduce"
				if r == odd && tc.name == "other op" {
					op = "Broadcast"
				}
				// Reported when the last call arrives, not at noDeadline.
				wantErr(t, fmt.Sprint("rank ", r), x.err, comm.ErrMismatch, op, []int{odd}, x.elapsed)
			}
			require.ErrorContains(t, res[0].err, "rank 1: ", "message does not show rank 1's call")
		})
	}
}

func TestFaultPanicAndErrorInRun(t *testing.T) {
	for _, mode := range []string{"panic", "error"} {
		t.Run(mode, func(t *testing.T) {
			const n, bad = 3, 1
			errs := make([]result, n)
			start := time.Now()
			userErr := errors.New("data loader failed")
			err := Run(ctxBG, n, Options{Timeout: noDeadline}, func(ctx context.Context, c comm.Comm) error {
				if c.Rank() == bad {
					if err := waitBlocked(c, n-1); err != nil {
						return err
					}
					if mode == "panic" {
						panic("boom")
					}
					return userErr
				}
				x, _ := tensor.Empty(tensor.Float32, 10)
				defer x.Free()
				e := c.AllReduce(ctx, x, comm.Sum)
				errs[c.Rank()] = result{e, time.Since(start)}
				return e
			})
			require.Error(t, err, "Run")
			if mode == "panic" {
				require.ErrorContains(t, err, "rank 1 panicked: boom", "Run")
			} else {
				require.ErrorIs(t, err, userErr, "Run")
			}
			for r, x := range errs {
				if r != bad {
					// Well within noDeadline: the abort is immediate.
					wantErr(t, fmt.Sprint("rank ", r), x.err, comm.ErrAborted, "AllReduce", []int{bad}, x.elapsed)
				}
			}
		})
	}
}

func TestAbort(t *testing.T) {
	const n = 3
	w := newWorld(t, n, noDeadline)
	cause := errors.New("operator pressed stop")
	go func() {
		waitBlocked(w.Comm(0), n) // the Recv and both Barrier calls; else Abort still fails them
		w.Abort(cause)
	}()
	res := onAllTimed(w.Comms(), func(c comm.Comm) error {
		if c.Rank() == 0 {
			return c.Recv(ctxBG, newTensor(t, tensor.Float32, 4), 2) // nobody sends
		}
		return c.Barrier(ctxBG) // rank 0 never joins
	})
	for r, x := range res {
		op := "Barrier"
		if r == 0 {
			op = "Recv"
		}
		wantErr(t, fmt.Sprint("rank ", r), x.err, comm.ErrAborted, op, nil, x.elapsed)
		require.ErrorIs(t, x.err, cause, "rank %d: does not wrap the cause", r)
	}
	require.ErrorIs(t, w.Comm(1).Barrier(ctxBG), comm.ErrAborted, "call after Abort")
}

func TestFaultRecvTimeout(t *testing.T) {
	w := newWorld(t, 2, faultDeadline)
	start := time.Now()
	err := w.Comm(1).Recv(ctxBG, newTensor(t, tensor.Float32, 4), 0)
	wantErr(t, "Recv", err, comm.ErrTimeout, "Recv", []int{0}, time.Since(start))
	require.GreaterOrEqual(t, time.Since(start), faultDeadline, "Recv gave up before the deadline")
}

func TestFaultSendRecvMismatch(t *testing.T) {
	w := newWorld(t, 2, faultDeadline)
	res := onAllTimed(w.Comms(), func(c comm.Comm) error {
		if c.Rank() == 0 {
			return c.Send(ctxBG, newTensor(t, tensor.Float32, 4), 1)
		}
		return c.Recv(ctxBG, newTensor(t, tensor.Float32, 5), 0)
	})
	wantErr(t, "sender", res[0].err, comm.ErrMismatch, "Send", []int{0, 1}, res[0].elapsed)
	wantErr(t, "receiver", res[1].err, comm.ErrMismatch, "Recv", []int{0, 1}, res[1].elapsed)
}

func TestFaultContextCancel(t *testing.T) {
	w := newWorld(t, 2, noDeadline)
	ctx, cancel := context.WithCancel(ctxBG)
	res := onAllTimed(w.Comms(), func(c comm.Comm) error {
		if c.Rank() == 1 {
			go func() { waitBlocked(c, 1); cancel() }() // cancel a pending call
			return c.Barrier(ctx)
		}
		// Rank 0 is late: it arrives once rank 1 has given up.
		if !waitUntil(func() bool { return broken(c) }) {
			return errors.New("rank 1 never gave up")
		}
		return c.Barrier(ctxBG)
	})
	wantErr(t, "rank 1", res[1].err, comm.ErrAborted, "Barrier", []int{1}, res[1].elapsed)
	require.ErrorIs(t, res[1].err, context.Canceled, "rank 1")
	require.ErrorIs(t, res[0].err, comm.ErrAborted, "rank 0")
}

func TestInvalidArguments(t *testing.T) {
	w := newWorld(t, 2, testTimeout)
	c := w.Comm(0)
	f := newTensor(t, tensor.Float32, 8)
	g := newTensor(t, tensor.Float32, 3)
	freed, _ := tensor.Empty(tensor.Float32, 4)
	freed.Free()
	cases := []struct {
		name string
		call func() error
	}{
		{"nil", func() error { return c.AllReduce(ctxBG, nil, comm.Sum) }},
		{"freed", func() error { return c.Broadcast(ctxBG, freed, 0) }},
		{"root", func() error { return c.Broadcast(ctxBG, f, 2) }},
		{"peer self", func() error { return c.Send(ctxBG, f, 0) }},
		{"rs sizes", func() error { return c.ReduceScatter(ctxBG, g, f, comm.Sum) }},
		{"ag sizes", func() error { return c.AllGather(ctxBG, f, g) }},
		{"ag overlap", func() error { x, _ := f.Slice(1, 4); return c.AllGather(ctxBG, f, x) }},
		{"a2a overlap", func() error { return c.AllToAll(ctxBG, f, f) }},
		{"bad op", func() error { return c.AllReduce(ctxBG, f, comm.ReduceOp(9)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.call(), comm.ErrInvalid)
		})
	}
}

// TestFaultCallerDeadline: a call whose own context's deadline passes says
// so and wraps context.DeadlineExceeded (still ErrTimeout, still naming the
// rank that had not joined); one that outlasts the group's timeout reads as
// before.
func TestFaultCallerDeadline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeout  time.Duration // the group's
		deadline time.Duration // the caller's context's, from the call; 0: none
		want     string
		callers  bool // wraps context.DeadlineExceeded
	}{
		{name: "caller's deadline already passed", timeout: noDeadline, deadline: -time.Second,
			want: "timed out: the caller's context deadline passed after", callers: true},
		{name: "caller's deadline passes while waiting", timeout: noDeadline, deadline: 50 * time.Millisecond,
			want: "timed out: the caller's context deadline passed after", callers: true},
		{name: "group timeout", timeout: faultDeadline,
			want: "never joined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 2, tc.timeout)
			ctx := ctxBG
			if tc.deadline != 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctxBG, tc.deadline)
				defer cancel()
			}
			start := time.Now()
			err := w.Comm(1).Barrier(ctx) // rank 0 never calls
			wantErr(t, "rank 1", err, comm.ErrTimeout, "Barrier", []int{0}, time.Since(start))
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, tc.callers, errors.Is(err, context.DeadlineExceeded), "%v: wraps context.DeadlineExceeded", err)
			if tc.callers {
				require.NotContains(t, err.Error(), "never joined")
			}
		})
	}
}
