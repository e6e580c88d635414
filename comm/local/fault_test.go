package local

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// faultDeadline is the operation timeout of the fault tests; every rank
// must report within faultDeadline + 1 s.
const faultDeadline = 300 * time.Millisecond

// wantErr checks that err is an *comm.Error wrapping sentinel, for op,
// blaming exactly ranks, returned by elapsed <= faultDeadline+1s.
func wantErr(t *testing.T, who string, err error, sentinel error, op string, ranks []int, elapsed time.Duration) {
	t.Helper()
	var ce *comm.Error
	switch {
	case err == nil:
		t.Fatalf("%s: no error, want %v", who, sentinel)
	case !errors.As(err, &ce):
		t.Fatalf("%s: %v (%T) is not a *comm.Error", who, err, err)
	case !errors.Is(err, sentinel):
		t.Fatalf("%s: %v does not wrap %v", who, err, sentinel)
	case ce.Op != op:
		t.Fatalf("%s: %v: Op %q, want %q", who, err, ce.Op, op)
	case ranks != nil && fmt.Sprint(ce.Ranks) != fmt.Sprint(ranks):
		t.Fatalf("%s: %v: Ranks %v, want %v", who, err, ce.Ranks, ranks)
	case elapsed > faultDeadline+time.Second:
		t.Fatalf("%s: returned after %v, want <= %v", who, elapsed, faultDeadline+time.Second)
	}
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
	res := onAllTimed(w.Comms(), func(c comm.Comm) error {
		if c.Rank() == sleeper {
			time.Sleep(faultDeadline + 200*time.Millisecond)
		}
		return c.AllReduce(ctxBG, bufs[c.Rank()], comm.Sum)
	})
	for r, x := range res {
		if r == sleeper {
			// It arrives to a group broken by its own absence.
			wantErr(t, "sleeper", x.err, comm.ErrAborted, "AllReduce", []int{sleeper}, x.elapsed-faultDeadline-200*time.Millisecond)
			if !errors.Is(x.err, comm.ErrTimeout) {
				t.Fatalf("sleeper: %v does not carry the original timeout", x.err)
			}
			continue
		}
		wantErr(t, fmt.Sprint("rank ", r), x.err, comm.ErrTimeout, "AllReduce", []int{sleeper}, x.elapsed)
		if x.elapsed < faultDeadline {
			t.Fatalf("rank %d gave up after %v, before the %v deadline", r, x.elapsed, faultDeadline)
		}
	}
	// The group stays broken: later calls fail at once.
	start := time.Now()
	err := w.Comm(0).Barrier(ctxBG)
	wantErr(t, "later call", err, comm.ErrAborted, "Barrier", []int{sleeper}, 0)
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("call on a broken group took %v", d)
	}
}

func TestFaultRankError(t *testing.T) {
	const n, bad = 4, 2
	w := newWorld(t, n, faultDeadline)
	bufs := floats(t, n, 100)
	wrong := newTensor(t, tensor.Uint8, 100) // no reductions over uint8
	res := onAllTimed(w.Comms(), func(c comm.Comm) error {
		if c.Rank() == bad {
			time.Sleep(20 * time.Millisecond) // let the others block first
			return c.AllReduce(ctxBG, wrong, comm.Sum)
		}
		return c.AllReduce(ctxBG, bufs[c.Rank()], comm.Sum)
	})
	for r, x := range res {
		if r == bad {
			wantErr(t, "bad rank", x.err, comm.ErrUnsupported, "AllReduce", nil, x.elapsed)
			continue
		}
		wantErr(t, fmt.Sprint("rank ", r), x.err, comm.ErrAborted, "AllReduce", []int{bad}, x.elapsed)
		if x.elapsed > faultDeadline {
			t.Fatalf("rank %d waited %v for a rank that had already failed", r, x.elapsed)
		}
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
			w := newWorld(t, n, faultDeadline)
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
				wantErr(t, fmt.Sprint("rank ", r), x.err, comm.ErrMismatch, op, []int{odd}, x.elapsed)
				if x.elapsed > faultDeadline {
					t.Fatalf("rank %d: mismatch reported after %v, not at once", r, x.elapsed)
				}
			}
			if msg := res[0].err.Error(); !strings.Contains(msg, "rank 1: ") {
				t.Fatalf("message does not show rank 1's call: %s", msg)
			}
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
			err := Run(ctxBG, n, Options{Timeout: 5 * time.Second}, func(ctx context.Context, c comm.Comm) error {
				if c.Rank() == bad {
					time.Sleep(20 * time.Millisecond)
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
			if err == nil || (mode == "panic" && !strings.Contains(err.Error(), "rank 1 panicked: boom")) ||
				(mode == "error" && !errors.Is(err, userErr)) {
				t.Fatalf("Run = %v", err)
			}
			for r, x := range errs {
				if r != bad {
					// Well within the 5 s operation timeout: the abort is immediate.
					wantErr(t, fmt.Sprint("rank ", r), x.err, comm.ErrAborted, "AllReduce", []int{bad}, x.elapsed)
				}
			}
		})
	}
}

func TestAbort(t *testing.T) {
	const n = 3
	w := newWorld(t, n, 10*time.Second)
	cause := errors.New("operator pressed stop")
	go func() {
		time.Sleep(50 * time.Millisecond)
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
		if !errors.Is(x.err, cause) {
			t.Fatalf("rank %d: %v does not wrap the cause", r, x.err)
		}
	}
	if err := w.Comm(1).Barrier(ctxBG); !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("call after Abort: %v", err)
	}
}

func TestFaultRecvTimeout(t *testing.T) {
	w := newWorld(t, 2, faultDeadline)
	start := time.Now()
	err := w.Comm(1).Recv(ctxBG, newTensor(t, tensor.Float32, 4), 0)
	wantErr(t, "Recv", err, comm.ErrTimeout, "Recv", []int{0}, time.Since(start))
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
	w := newWorld(t, 2, 10*time.Second)
	ctx, cancel := context.WithCancel(ctxBG)
	res := onAllTimed(w.Comms(), func(c comm.Comm) error {
		if c.Rank() == 1 {
			go func() { time.Sleep(30 * time.Millisecond); cancel() }()
			return c.Barrier(ctx)
		}
		time.Sleep(time.Second) // rank 0 is late; rank 1 gives up
		return c.Barrier(ctxBG)
	})
	wantErr(t, "rank 1", res[1].err, comm.ErrAborted, "Barrier", []int{1}, res[1].elapsed)
	if !errors.Is(res[1].err, context.Canceled) {
		t.Fatalf("rank 1: %v does not wrap context.Canceled", res[1].err)
	}
	if !errors.Is(res[0].err, comm.ErrAborted) {
		t.Fatalf("rank 0: %v, want ErrAborted", res[0].err)
	}
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
			if err := tc.call(); !errors.Is(err, comm.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
}
