package comm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/stretchr/testify/require"
)

func TestWaitDone(t *testing.T) {
	outcome := errors.New("the operation's outcome")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	closed := make(chan struct{})
	close(closed)
	cases := []struct {
		name string
		ctx  context.Context
		done chan struct{}
		want error // outcome, or the ctx error Wait gave up with
	}{
		{"over", context.Background(), closed, outcome},
		{"over, ctx ended too", cancelled, closed, outcome},
		{"cancelled", cancelled, make(chan struct{}), context.Canceled},
		{"deadline", expired, make(chan struct{}), context.DeadlineExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := comm.WaitDone(tc.ctx, tc.done, func() error { return outcome }, comm.OpAllGather, "data[pipe=0]", 3)
			require.ErrorIs(t, err, tc.want)
			if tc.want == outcome {
				return
			}
			var ce *comm.Error
			require.ErrorAs(t, err, &ce, "want a *comm.Error")
			require.Equal(t, "AllGather", ce.Op, "%v", err)
			require.Equal(t, "data[pipe=0]", ce.Group, "%v", err)
			require.Equal(t, 3, ce.Rank, "%v", err)
			require.ErrorContains(t, err, "Wait gave up, the operation continues")
		})
	}
}

// A Wait that gives up leaves the operation running: a later Wait gets
// its outcome once the other rank joins.
func TestWaitGivesUpOperationContinues(t *testing.T) {
	w, err := local.NewWorld(2, local.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	defer w.Close()
	work := w.Comm(0).BarrierAsync(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, work.Wait(ctx), context.DeadlineExceeded, "Wait before rank 1 joined: want it to give up")
	require.NoError(t, w.Comm(1).Barrier(context.Background()))
	require.NoError(t, work.Wait(context.Background()), "Wait after rank 1 joined")
}

// TestNotJoined: whose clock ran out decides the wording and whether
// context.DeadlineExceeded is wrapped; a backend's cause stays reachable.
func TestNotJoined(t *testing.T) {
	cause := errors.New("transport timed out")
	for _, tc := range []struct {
		name        string
		ctx         context.Context
		timeout     time.Duration // the group's
		cause       error
		want        string
		callersWrap bool
	}{
		{name: "no caller deadline", ctx: context.Background(), timeout: time.Second,
			want: "timed out after 1.5s: ranks [2] never joined"},
		{name: "caller's deadline later than the timeout", ctx: withDeadline(t, time.Hour), timeout: time.Second,
			want: "timed out after 1.5s: ranks [2] never joined"},
		{name: "caller's deadline first", ctx: withDeadline(t, time.Second), timeout: time.Hour,
			want: "timed out: the caller's context deadline passed after 1.5s, before ranks [2] joined: context deadline exceeded", callersWrap: true},
		{name: "with a cause", ctx: context.Background(), timeout: time.Second, cause: cause,
			want: "timed out after 1.5s: ranks [2] never joined: transport timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := comm.NotJoined(comm.CallerBinds(tc.ctx, tc.timeout), 1500*time.Millisecond, "[2]", tc.cause)
			require.EqualError(t, err, tc.want)
			require.ErrorIs(t, err, comm.ErrTimeout)
			require.Equal(t, tc.callersWrap, errors.Is(err, context.DeadlineExceeded))
			if tc.cause != nil {
				require.ErrorIs(t, err, tc.cause)
			}
		})
	}
}

func withDeadline(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
