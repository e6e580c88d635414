package commslog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/commslog"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBandwidthFormulas(t *testing.T) {
	cases := []struct {
		op     comm.OpKind
		n      int
		factor float64
	}{
		{comm.OpAllReduce, 1, 0}, {comm.OpAllReduce, 2, 1}, {comm.OpAllReduce, 4, 1.5}, {comm.OpAllReduce, 8, 1.75},
		{comm.OpReduceScatter, 4, 0.75}, {comm.OpAllGather, 4, 0.75}, {comm.OpAllToAll, 8, 0.875},
		{comm.OpAllGather, 1, 0}, {comm.OpBroadcast, 4, 1}, {comm.OpReduce, 8, 1},
		{comm.OpSend, 2, 1}, {comm.OpRecv, 2, 1}, {comm.OpBarrier, 4, 0},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v/n=%d", tc.op, tc.n), func(t *testing.T) {
			assert.InDelta(t, tc.factor, commslog.BusFactor(tc.op, tc.n), 1e-15)
			// 1 GB in 2 s is 4 Gbps of algorithm bandwidth
			alg, bus := commslog.Bandwidth(tc.op, 1e9, tc.n, 2*time.Second)
			assert.InDelta(t, 4.0, alg, 1e-12)
			assert.InDelta(t, 4*tc.factor, bus, 1e-12)
		})
	}
	alg, bus := commslog.Bandwidth(comm.OpAllReduce, 100, 4, 0)
	assert.Zero(t, alg)
	assert.Zero(t, bus)
}

// clock is a fake time source that advances by step at each reading, so a
// recorded operation (two readings) lasts step.
type clock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

func f32(t *testing.T, n int, v float32) *tensor.Tensor {
	t.Helper()
	d := make([]float32, n)
	for i := range d {
		d[i] = v
	}
	x, err := tensor.FromFloat32(d, n)
	require.NoError(t, err)
	t.Cleanup(func() { x.Free() })
	return x
}

// onRanks runs fn on every rank of a local world of n, each rank's comm
// wrapped into its own Logger (clock steps of 1 ms), and returns the
// loggers.
func onRanks(t *testing.T, n int, o commslog.Options, fn func(c comm.Comm) error) []*commslog.Logger {
	t.Helper()
	w, err := local.NewWorld(n, local.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	defer w.Close()
	ls := make([]*commslog.Logger, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		ro := o
		ro.Now = (&clock{step: time.Millisecond}).now
		if ro.Log == nil {
			ro.Log = &bytes.Buffer{}
		}
		ls[r], err = commslog.New(ro)
		require.NoError(t, err)
		wg.Go(func() { errs[r] = fn(ls[r].Wrap(w.Comm(r))) })
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return ls
}

// everyOp makes each kind of call once (all-reduce twice, one of them
// async) on 1000-float32 messages and checks the all-reduce's result.
func everyOp(t *testing.T) func(c comm.Comm) error {
	return func(c comm.Comm) error {
		ctx := context.Background()
		n, m := c.Size(), 1000
		x := f32(t, m, float32(c.Rank()+1))
		if err := c.AllReduce(ctx, x, comm.Sum); err != nil {
			return err
		}
		if got, _ := x.Float32s(); got[0] != float32(n*(n+1)/2) {
			return fmt.Errorf("all-reduce gave %v, want %d", got[0], n*(n+1)/2)
		}
		if err := c.AllReduceAsync(ctx, x, comm.Sum).Wait(ctx); err != nil {
			return err
		}
		big, small := f32(t, n*m, 1), f32(t, m, 1)
		if err := c.ReduceScatter(ctx, small, big, comm.Sum); err != nil {
			return err
		}
		if err := c.AllGatherAsync(ctx, big, small).Wait(ctx); err != nil {
			return err
		}
		other := f32(t, n*m, 0)
		if err := c.AllToAll(ctx, other, big); err != nil {
			return err
		}
		if err := c.Broadcast(ctx, x, 0); err != nil {
			return err
		}
		if err := c.Reduce(ctx, x, 0, comm.Max); err != nil {
			return err
		}
		if c.Rank() == 0 {
			if err := c.Send(ctx, x, 1); err != nil {
				return err
			}
		} else if c.Rank() == 1 {
			if err := c.RecvAsync(ctx, x, 0).Wait(ctx); err != nil {
				return err
			}
		}
		return c.Barrier(ctx)
	}
}

func TestRecordsCountsBytesAndBandwidths(t *testing.T) {
	const n = 4
	ls := onRanks(t, n, commslog.Options{ProfAll: true}, everyOp(t))
	for r, l := range ls {
		type row struct {
			bytes int64
			count int
		}
		got := map[string]row{}
		for _, s := range l.Stats() {
			got[s.Name] = row{s.Bytes, s.Count}
			assert.Equal(t, time.Duration(s.Count)*time.Millisecond, s.Total, "rank %d %s", r, s.Name)
			assert.Equal(t, time.Millisecond, s.AvgLatency, "rank %d %s", r, s.Name)
			if s.Bytes > 0 {
				// S bytes in 1 ms
				assert.InDelta(t, float64(s.Bytes)*8/1e-3/1e9, s.AlgbwGbps, 1e-9, "%s", s.Name)
			}
		}
		want := map[string]row{
			"all_reduce":             {4000, 2},
			"reduce_scatter_tensor":  {n * 4000, 1},
			"all_gather_into_tensor": {n * 4000, 1},
			"all_to_all_single":      {n * 4000, 1},
			"broadcast":              {4000, 1},
			"reduce":                 {4000, 1},
			"barrier":                {0, 1},
		}
		switch r {
		case 0:
			want["send"] = row{4000, 1}
		case 1:
			want["recv"] = row{4000, 1}
		}
		assert.Equal(t, want, got, "rank %d", r)
		for _, s := range l.Stats() {
			op := map[string]comm.OpKind{"all_reduce": comm.OpAllReduce, "reduce_scatter_tensor": comm.OpReduceScatter,
				"all_gather_into_tensor": comm.OpAllGather, "all_to_all_single": comm.OpAllToAll, "broadcast": comm.OpBroadcast,
				"reduce": comm.OpReduce, "send": comm.OpSend, "recv": comm.OpRecv, "barrier": comm.OpBarrier}[s.Name]
			assert.InDelta(t, s.AlgbwGbps*commslog.BusFactor(op, n), s.BusbwGbps, 1e-9, "%s", s.Name)
		}
	}
}

func TestProfOps(t *testing.T) {
	ls := onRanks(t, 2, commslog.Options{ProfOps: []string{"all_gather", "barrier"}}, everyOp(t))
	var names []string
	for _, s := range ls[0].Stats() {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"all_gather_into_tensor", "barrier"}, names)

	_, err := commslog.FromConfig(config.CommsLogger{ProfOps: []string{"all_reduce", "allreduce"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `comms_logger.prof_ops[1] = "allreduce"`)
	assert.Contains(t, err.Error(), "all_reduce, all_to_all")
	o, err := commslog.FromConfig(config.CommsLogger{Enabled: true, Verbose: true, ProfAll: true, Debug: true})
	require.NoError(t, err)
	assert.Equal(t, commslog.Options{Verbose: true, ProfAll: true, Debug: true}, o)
}

func TestSummaryLayout(t *testing.T) {
	ls := onRanks(t, 2, commslog.Options{ProfAll: true}, func(c comm.Comm) error {
		ctx := context.Background()
		for _, m := range []int{256, 256, 256 * 1024} {
			if err := c.AllReduce(ctx, f32(t, m, 1), comm.Sum); err != nil {
				return err
			}
		}
		return c.AllGather(ctx, f32(t, 2*384, 0), f32(t, 384, 1))
	})
	var b bytes.Buffer
	require.NoError(t, ls[0].Summary(&b))
	pad := func(s string) string { return s + strings.Repeat(" ", 20-len(s)) }
	row := func(cols ...string) string {
		var s string
		for _, c := range cols {
			s += pad(c)
		}
		return s
	}
	// 1 KB in 1 ms is 0.008192 Gbps; 1 MB 8.388608 Gbps; 3 KB 0.024576
	want := []string{
		row("Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)"),
		"all_reduce",
		row(" ", "1.0 KB", "2", "2.00", "1.00", "0.01", "0.01"),
		row(" ", "1.0 MB", "1", "1.00", "1.00", "8.39", "8.39"),
		"all_gather_into_tensor",
		row(" ", "3.0 KB", "1", "1.00", "1.00", "0.02", "0.01"),
		"",
	}
	assert.Equal(t, strings.Join(want, "\n"), b.String())
}

func TestConvertSizeInVerboseLines(t *testing.T) {
	cases := []struct {
		floats int
		size   string
	}{{250, "1000.0 B"}, {256, "1.0 KB"}, {384, "1.5 KB"}, {30864197, "117.74 MB"}}
	for _, tc := range cases {
		var log bytes.Buffer
		onRanks(t, 2, commslog.Options{ProfAll: true, Verbose: true, Log: &log}, func(c comm.Comm) error {
			return c.Broadcast(context.Background(), f32(t, tc.floats, 1), 0)
		})
		alg := float64(tc.floats) * 4 * 8 / 1e-3 / 1e9
		want := fmt.Sprintf("[Rank 0] rank=0 | comm op: broadcast | time (ms): 1.00 | msg size: %s | algbw (Gbps): %.2f  | busbw (Gbps): %.2f \n", tc.size, alg, alg)
		assert.Equal(t, want, log.String(), "only world rank 0 logs, once")
	}
}

func TestDebugNamesTheCaller(t *testing.T) {
	ls := onRanks(t, 1, commslog.Options{ProfAll: true, Debug: true}, func(c comm.Comm) error {
		return c.Barrier(context.Background())
	})
	require.Len(t, ls[0].Stats(), 1)
	assert.Regexp(t, `^barrier \| \[Caller Func: commslog_test\.TestDebugNamesTheCaller\.func\d+\]$`, ls[0].Stats()[0].Name)
}

func TestSplitReturnsWrappedComms(t *testing.T) {
	ls := onRanks(t, 4, commslog.Options{ProfAll: true}, func(c comm.Comm) error {
		ctx := context.Background()
		s, err := c.Split(ctx, c.Rank()%2, c.Rank(), "")
		if err != nil {
			return err
		}
		if _, ok := s.(interface{ Unwrap() comm.Comm }); !ok {
			return fmt.Errorf("Split returned %T, not a logged comm", s)
		}
		if err := s.AllReduce(ctx, f32(t, 10, 1), comm.Sum); err != nil {
			return err
		}
		none, err := c.Split(ctx, comm.NoColor, 0, "")
		if none != nil || err != nil {
			return fmt.Errorf("NoColor split gave %v, %v", none, err)
		}
		return s.Close()
	})
	st := ls[3].Stats()
	require.Len(t, st, 1)
	assert.Equal(t, "all_reduce", st[0].Name)
	// a group of 2: busbw = algbw * 2(2-1)/2
	assert.InDelta(t, st[0].AlgbwGbps, st[0].BusbwGbps, 1e-12)
}

func TestErrorsAndDeadlinesAreTheComms(t *testing.T) {
	w, err := local.NewWorld(2, local.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	defer w.Close()
	l, err := commslog.New(commslog.Options{ProfAll: true})
	require.NoError(t, err)
	c := l.Wrap(w.Comm(0))

	// rank 1 never comes: the context's deadline ends the call, as unwrapped
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = c.Barrier(ctx)
	var ce *comm.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Barrier", ce.Op)
	assert.Less(t, time.Since(t0), 5*time.Second)
	// the group is broken: the next call fails at once, wrapping the first
	err = c.AllReduce(context.Background(), f32(t, 4, 1), comm.Sum)
	require.ErrorAs(t, err, &ce)
	assert.Empty(t, l.Stats(), "failed operations are not recorded")

	// a bad argument is the comm's ErrInvalid
	w1, err := local.NewWorld(1, local.Options{})
	require.NoError(t, err)
	defer w1.Close()
	err = l.Wrap(w1.Comm(0)).AllReduce(context.Background(), nil, comm.Sum)
	assert.ErrorIs(t, err, comm.ErrInvalid)
	assert.Empty(t, l.Stats())
	assert.Nil(t, l.Wrap(nil))
}

func TestAsyncLatencyEndsAtTheWaitThatSeesItDone(t *testing.T) {
	w, err := local.NewWorld(2, local.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	defer w.Close()
	clk := &clock{step: time.Millisecond}
	l, err := commslog.New(commslog.Options{ProfAll: true, Now: clk.now})
	require.NoError(t, err)
	c := l.Wrap(w.Comm(0))
	x := f32(t, 8, 1)
	work := c.AllReduceAsync(context.Background(), x, comm.Sum) // clock: 1 ms

	// rank 1 has not joined: a Wait that gives up records nothing
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.Error(t, work.Wait(ctx))
	assert.False(t, errors.Is(work.Wait(ctx), comm.ErrTimeout))
	assert.Empty(t, l.Stats())

	y := f32(t, 8, 2)
	require.NoError(t, w.Comm(1).AllReduce(context.Background(), y, comm.Sum))
	<-work.Done()
	require.NoError(t, work.Wait(context.Background())) // clock: 2 ms
	require.NoError(t, work.Wait(context.Background()))
	st := l.Stats()
	require.Len(t, st, 1)
	assert.Equal(t, 1, st[0].Count, "recorded once")
	assert.Equal(t, time.Millisecond, st[0].Total)
	got, _ := x.Float32s()
	assert.Equal(t, float32(3), got[0])
}

// deviceComm is a comm that says it moves device memory, as NCCL's does.
type deviceComm struct{ comm.Comm }

func (deviceComm) Device() tensor.Device { return tensor.CUDA(3) }

func TestWrapKeepsWhatAnEngineAsks(t *testing.T) {
	w, err := local.NewWorld(1, local.Options{})
	require.NoError(t, err)
	defer w.Close()
	l, err := commslog.New(commslog.Options{ProfAll: true})
	require.NoError(t, err)

	type backended interface{ Backend() backend.Backend }
	c := l.Wrap(w.Comm(0))
	require.Implements(t, (*backended)(nil), c)
	assert.Same(t, w.Comm(0).(backended).Backend(), c.(backended).Backend(), "the rank's CPU pool")
	_, isDev := c.(interface{ Device() tensor.Device })
	assert.False(t, isDev, "a host comm does not claim a device")

	d := l.Wrap(deviceComm{w.Comm(0)})
	dc, ok := d.(interface{ Device() tensor.Device })
	require.True(t, ok)
	assert.Equal(t, tensor.CUDA(3), dc.Device())
	assert.Nil(t, d.(backended).Backend())
}
