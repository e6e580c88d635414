//go:build cuda

package nccl

// One-rank communicators only: NCCL refuses two ranks on one GPU, and the
// CI GPU machine has one. Every operation runs on the device and is checked
// on the host; the abort tests make NCCL hang for real (a rank that never
// joins, a receive never matched) and require an error within the deadline.
// Without a device or without libnccl.so.2 the tests skip, or fail under
// gpu-check (internal/gputest).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/cuda"
	"github.com/deepgo-ml/deepgo/internal/gputest"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newID(t *testing.T) UniqueID {
	t.Helper()
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		gputest.Unavailable(t, "no usable CUDA device (%d, %v)", n, err)
	}
	id, err := GetUniqueID()
	if errors.Is(err, comm.ErrUnsupported) {
		gputest.Unavailable(t, "NCCL not loadable: %v", err)
	}
	require.NoError(t, err)
	return id

}

func one(t *testing.T, opts Options) *ncclComm {
	t.Helper()
	id := newID(t)
	opts.Timeout = 60 * time.Second
	c, err := New(context.Background(), id, 0, 1, 0, opts)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	t.Logf("NCCL %d", Version())
	return c.(*ncclComm)
}

// dev copies vals to a new float32 device tensor.
func dev(t *testing.T, vals ...float32) *tensor.Tensor {
	t.Helper()
	h, err := tensor.FromFloat32(vals, len(vals))
	require.NoError(t, err)
	d, err := cuda.Malloc(0, tensor.Float32, len(vals))
	require.NoError(t, err)
	t.Cleanup(func() { d.Storage().Free() })
	require.NoError(t, cuda.CopyToDevice(d, h))
	return d
}

// expect copies d back and compares it with want.
func expect(t *testing.T, what string, d *tensor.Tensor, want ...float32) {
	t.Helper()
	h, err := tensor.Empty(tensor.Float32, d.Numel())
	require.NoError(t, err)
	require.NoError(t, cuda.CopyToHost(h, d))
	got, _ := h.Float32s()
	assert.Equal(t, want, got, what)
}

func TestOps(t *testing.T) {
	c := one(t, Options{})
	ctx := context.Background()
	in := []float32{1, -2, 3.5, 0}
	for _, op := range []comm.ReduceOp{comm.Sum, comm.Avg, comm.Max, comm.Min} {
		d := dev(t, in...)
		require.NoError(t, c.AllReduce(ctx, d, op))
		expect(t, "AllReduce "+op.String(), d, in...)
	}

	src, dst := dev(t, in...), dev(t, 0, 0, 0, 0)
	require.NoError(t, c.ReduceScatter(ctx, dst, src, comm.Sum))
	expect(t, "ReduceScatter", dst, in...)
	require.NoError(t, c.ReduceScatter(ctx, src, src, comm.Max)) // in place: chunk 0 of 1
	expect(t, "ReduceScatter in place", src, in...)

	dst = dev(t, 0, 0, 0, 0)
	require.NoError(t, c.AllGather(ctx, dst, src))
	expect(t, "AllGather", dst, in...)

	b := dev(t, in...)
	require.NoError(t, c.Broadcast(ctx, b, 0))
	expect(t, "Broadcast", b, in...)
	require.NoError(t, c.Reduce(ctx, b, 0, comm.Sum))
	expect(t, "Reduce", b, in...)

	dst = dev(t, 0, 0, 0, 0)
	require.NoError(t, c.AllToAll(ctx, dst, src))
	expect(t, "AllToAll", dst, in...)

	require.NoError(t, c.Barrier(ctx))
	w := c.AllReduceAsync(ctx, b, comm.Avg)
	require.NoError(t, c.BarrierAsync(ctx).Wait(ctx))
	require.NoError(t, w.Wait(ctx))
	<-w.Done()
	expect(t, "AllReduceAsync", b, in...)
}

func TestIntReduce(t *testing.T) {
	c := one(t, Options{})
	d, err := cuda.Malloc(0, tensor.Int64, 3)
	require.NoError(t, err)
	defer d.Storage().Free()
	require.NoError(t, c.AllReduce(context.Background(), d, comm.Max))
}

func TestSplit(t *testing.T) {
	c := one(t, Options{Name: "w"})
	ctx := context.Background()
	s, err := c.Split(ctx, 3, 7, "sub")
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, 1, s.Size(), "split: size")
	require.Equal(t, 0, s.Rank(), "split: rank")
	require.Equal(t, "sub", s.Name(), "split: name")
	require.Equal(t, []int{0}, s.Members(), "split: members")
	d := dev(t, 2, 4)
	require.NoError(t, s.AllReduce(ctx, d, comm.Sum))
	expect(t, "AllReduce on split", d, 2, 4)
	n, err := c.Split(ctx, comm.NoColor, 0, "")
	require.NoError(t, err, "Split(NoColor)")
	require.Nil(t, n, "Split(NoColor)")
	anon, err := c.Split(ctx, 0, 0, "")
	require.NoError(t, err)
	defer anon.Close()
	assert.Equal(t, "w/split3:0", anon.Name(), "derived name")
}

func TestInvalidBreaks(t *testing.T) {
	c := one(t, Options{})
	ctx := context.Background()
	d := dev(t, 1)
	err := c.Send(ctx, d, 0)
	var ce *comm.Error
	require.ErrorAs(t, err, &ce, "Send to self")
	require.ErrorIs(t, err, comm.ErrInvalid, "Send to self")
	require.Equal(t, "Send", ce.Op, "Send to self: the error's op")
	require.ErrorIs(t, c.Barrier(ctx), comm.ErrAborted, "Barrier on a broken group")
	h, _ := tensor.Empty(tensor.Float32, 1)
	require.ErrorIs(t, c.AllReduce(ctx, h, comm.Sum), comm.ErrAborted, "AllReduce after break")
	require.NoError(t, c.Close())
	require.ErrorIs(t, c.Barrier(ctx), comm.ErrClosed, "Barrier after Close")
}

// A rank that never joins: init must fail at the deadline, not hang.
func TestInitAbort(t *testing.T) {
	id := newID(t)
	t0 := time.Now()
	_, err := New(context.Background(), id, 0, 2, 0, Options{Timeout: 2 * time.Second})
	require.ErrorIs(t, err, comm.ErrTimeout, "New with a missing rank")
	require.LessOrEqual(t, time.Since(t0), 30*time.Second, "abort took too long")
}

// A receive never matched fails and breaks the group. Where NCCL hangs its
// kernel on it, the deadline must abort the communicator and fail the work;
// on one rank NCCL (2.x) instead rejects a self-receive without a matching
// send as invalid usage, and the group must break all the same. (The
// deadline path of an operation then stays untested: it needs two GPUs.)
func TestOpAbort(t *testing.T) {
	c := one(t, Options{})
	d := dev(t, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	t0 := time.Now()
	w := c.start(ctx, comm.OpRecv, func() (launch, error) { return bytesOf(kindRecv, d, 0), nil })
	err := w.Wait(context.Background())
	require.Error(t, err, "an unmatched self-receive succeeded")
	if errors.Is(err, comm.ErrInvalid) {
		t.Logf("NCCL rejected the unmatched self-receive (no hang to abort): %v", err)
		require.ErrorIs(t, c.Barrier(context.Background()), comm.ErrAborted, "Barrier after the rejected receive")
		return
	}
	require.ErrorIs(t, err, comm.ErrTimeout, "unmatched Recv")
	t.Logf("after %v: %v", time.Since(t0), err)
	require.LessOrEqual(t, time.Since(t0), 2*time.Second+abortGrace+5*time.Second, "abort took too long")
	require.ErrorIs(t, c.Barrier(context.Background()), comm.ErrAborted, "Barrier after abort")
}

func TestNewFromStore(t *testing.T) {
	newID(t) // skips without a device or NCCL
	srv, err := comm.ListenStore("127.0.0.1:0")
	require.NoError(t, err)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := comm.DialStore(ctx, srv.Addr())
	require.NoError(t, err)
	defer st.Close()
	c, err := NewFromStore(ctx, st, 0, 1, 0, Options{})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Barrier(ctx))
}

// Loading needs no GPU: it runs on every machine that builds with -tags cuda.
func TestLoad(t *testing.T) {
	if err := load(); err != nil {
		gputest.Unavailable(t, "NCCL not loadable: %v", err)
	}
	require.GreaterOrEqual(t, Version(), minVersion, "Version()")
	t.Logf("loaded NCCL %d from %s", Version(), loadedFrom)
	// a copy of build/cuda at any path finds the libnccl linked next to it
	// (no DEEPGO_NCCL_LIB, no loader path, no source tree needed)
	exe, err := os.Executable()
	require.NoError(t, err)
	next := filepath.Join(filepath.Dir(exe), "lib", "libnccl.so.2")
	if _, err := os.Stat(next); err == nil && os.Getenv("DEEPGO_NCCL_LIB") == "" {
		require.Equal(t, next, loadedFrom, "loaded a libnccl not next to the executable")
	}
}

func TestCandidates(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DEEPGO_NCCL_LIB", dir)
	c := candidates()
	exe, err := os.Executable()
	require.NoError(t, err)
	want := []string{filepath.Join(dir, "libnccl.so.2"), filepath.Join(filepath.Dir(exe), "lib", "libnccl.so.2"),
		filepath.Join(filepath.Dir(exe), "libnccl.so.2"), "libnccl.so.2"}
	require.GreaterOrEqual(t, len(c), len(want), "candidates() = %q, want %q first", c, want)
	require.Equal(t, want, c[:len(want)], "candidates() = %q, want these first", c)

}
