package comm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
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
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
			if tc.want == outcome {
				return
			}
			var ce *comm.Error
			if !errors.As(err, &ce) || ce.Op != "AllGather" || ce.Group != "data[pipe=0]" || ce.Rank != 3 ||
				!strings.Contains(err.Error(), "Wait gave up, the operation continues") {
				t.Fatalf("%v (%#v), want a *comm.Error for AllGather on data[pipe=0], rank 3", err, ce)
			}
		})
	}
}

// A Wait that gives up leaves the operation running: a later Wait gets
// its outcome once the other rank joins.
func TestWaitGivesUpOperationContinues(t *testing.T) {
	w, err := local.NewWorld(2, local.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	work := w.Comm(0).BarrierAsync(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := work.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait before rank 1 joined: %v, want it to give up", err)
	}
	if err := w.Comm(1).Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := work.Wait(context.Background()); err != nil {
		t.Fatalf("Wait after rank 1 joined: %v", err)
	}
}
