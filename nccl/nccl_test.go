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
	"slices"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/cuda"
	"github.com/deepgo-ml/deepgo/internal/gputest"
	"github.com/deepgo-ml/deepgo/tensor"
)

func newID(t *testing.T) UniqueID {
	t.Helper()
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		gputest.Unavailable(t, "no usable CUDA device (%d, %v)", n, err)
	}
	id, err := GetUniqueID()
	if errors.Is(err, comm.ErrUnsupported) {
		gputest.Unavailable(t, "NCCL not loadable: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	return id
}

func one(t *testing.T, opts Options) *ncclComm {
	t.Helper()
	id := newID(t)
	opts.Timeout = 60 * time.Second
	c, err := New(context.Background(), id, 0, 1, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Logf("NCCL %d", Version())
	return c.(*ncclComm)
}

// dev copies vals to a new float32 device tensor.
func dev(t *testing.T, vals ...float32) *tensor.Tensor {
	t.Helper()
	h, err := tensor.FromFloat32(vals, len(vals))
	if err != nil {
		t.Fatal(err)
	}
	d, err := cuda.Malloc(0, tensor.Float32, len(vals))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Storage().Free() })
	if err := cuda.CopyToDevice(d, h); err != nil {
		t.Fatal(err)
	}
	return d
}

// expect copies d back and compares it with want.
func expect(t *testing.T, what string, d *tensor.Tensor, want ...float32) {
	t.Helper()
	h, err := tensor.Empty(tensor.Float32, d.Numel())
	if err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyToHost(h, d); err != nil {
		t.Fatal(err)
	}
	got, _ := h.Float32s()
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func TestOps(t *testing.T) {
	c := one(t, Options{})
	ctx := context.Background()
	in := []float32{1, -2, 3.5, 0}
	for _, op := range []comm.ReduceOp{comm.Sum, comm.Avg, comm.Max, comm.Min} {
		d := dev(t, in...)
		if err := c.AllReduce(ctx, d, op); err != nil {
			t.Fatal(err)
		}
		expect(t, "AllReduce "+op.String(), d, in...)
	}

	src, dst := dev(t, in...), dev(t, 0, 0, 0, 0)
	if err := c.ReduceScatter(ctx, dst, src, comm.Sum); err != nil {
		t.Fatal(err)
	}
	expect(t, "ReduceScatter", dst, in...)
	if err := c.ReduceScatter(ctx, src, src, comm.Max); err != nil { // in place: chunk 0 of 1
		t.Fatal(err)
	}
	expect(t, "ReduceScatter in place", src, in...)

	dst = dev(t, 0, 0, 0, 0)
	if err := c.AllGather(ctx, dst, src); err != nil {
		t.Fatal(err)
	}
	expect(t, "AllGather", dst, in...)

	b := dev(t, in...)
	if err := c.Broadcast(ctx, b, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, "Broadcast", b, in...)
	if err := c.Reduce(ctx, b, 0, comm.Sum); err != nil {
		t.Fatal(err)
	}
	expect(t, "Reduce", b, in...)

	dst = dev(t, 0, 0, 0, 0)
	if err := c.AllToAll(ctx, dst, src); err != nil {
		t.Fatal(err)
	}
	expect(t, "AllToAll", dst, in...)

	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	w := c.AllReduceAsync(ctx, b, comm.Avg)
	if err := c.BarrierAsync(ctx).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	expect(t, "AllReduceAsync", b, in...)
}

func TestIntReduce(t *testing.T) {
	c := one(t, Options{})
	d, err := cuda.Malloc(0, tensor.Int64, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Storage().Free()
	if err := c.AllReduce(context.Background(), d, comm.Max); err != nil {
		t.Fatal(err)
	}
}

func TestSplit(t *testing.T) {
	c := one(t, Options{Name: "w"})
	ctx := context.Background()
	s, err := c.Split(ctx, 3, 7, "sub")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Size() != 1 || s.Rank() != 0 || s.Name() != "sub" || !slices.Equal(s.Members(), []int{0}) {
		t.Fatalf("split: size %d rank %d name %q members %v", s.Size(), s.Rank(), s.Name(), s.Members())
	}
	d := dev(t, 2, 4)
	if err := s.AllReduce(ctx, d, comm.Sum); err != nil {
		t.Fatal(err)
	}
	expect(t, "AllReduce on split", d, 2, 4)
	if n, err := c.Split(ctx, comm.NoColor, 0, ""); n != nil || err != nil {
		t.Fatalf("Split(NoColor) = %v, %v", n, err)
	}
	anon, err := c.Split(ctx, 0, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if anon.Name() != "w/split3:0" {
		t.Errorf("derived name %q", anon.Name())
	}
}

func TestInvalidBreaks(t *testing.T) {
	c := one(t, Options{})
	ctx := context.Background()
	d := dev(t, 1)
	err := c.Send(ctx, d, 0)
	var ce *comm.Error
	if !errors.As(err, &ce) || !errors.Is(err, comm.ErrInvalid) || ce.Op != "Send" {
		t.Fatalf("Send to self: %v, want *comm.Error wrapping ErrInvalid", err)
	}
	if err := c.Barrier(ctx); !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("Barrier on a broken group: %v, want ErrAborted", err)
	}
	h, _ := tensor.Empty(tensor.Float32, 1)
	if err := c.AllReduce(ctx, h, comm.Sum); !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("AllReduce after break: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(ctx); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("Barrier after Close: %v, want ErrClosed", err)
	}
}

// A rank that never joins: init must fail at the deadline, not hang.
func TestInitAbort(t *testing.T) {
	id := newID(t)
	t0 := time.Now()
	_, err := New(context.Background(), id, 0, 2, 0, Options{Timeout: 2 * time.Second})
	if !errors.Is(err, comm.ErrTimeout) {
		t.Fatalf("New with a missing rank: %v, want ErrTimeout", err)
	}
	if d := time.Since(t0); d > 30*time.Second {
		t.Fatalf("abort took %v", d)
	}
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
	if err == nil {
		t.Fatal("an unmatched self-receive succeeded")
	}
	if errors.Is(err, comm.ErrInvalid) {
		t.Logf("NCCL rejected the unmatched self-receive (no hang to abort): %v", err)
		if err := c.Barrier(context.Background()); !errors.Is(err, comm.ErrAborted) {
			t.Fatalf("Barrier after the rejected receive: %v, want ErrAborted", err)
		}
		return
	}
	if !errors.Is(err, comm.ErrTimeout) {
		t.Fatalf("unmatched Recv: %v, want ErrTimeout", err)
	}
	t.Logf("after %v: %v", time.Since(t0), err)
	if d := time.Since(t0); d > 2*time.Second+abortGrace+5*time.Second {
		t.Fatalf("abort took %v", d)
	}
	if err := c.Barrier(context.Background()); !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("Barrier after abort: %v, want ErrAborted", err)
	}
}

func TestNewFromStore(t *testing.T) {
	newID(t) // skips without a device or NCCL
	srv, err := comm.ListenStore("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := comm.DialStore(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := NewFromStore(ctx, st, 0, 1, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

// Loading needs no GPU: it runs on every machine that builds with -tags cuda.
func TestLoad(t *testing.T) {
	if err := load(); err != nil {
		gputest.Unavailable(t, "NCCL not loadable: %v", err)
	}
	if v := Version(); v < minVersion {
		t.Fatalf("Version() = %d", v)
	}
	t.Logf("loaded NCCL %d from %s", Version(), loadedFrom)
	// a copy of build/cuda at any path finds the libnccl linked next to it
	// (no DEEPGO_NCCL_LIB, no loader path, no source tree needed)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(filepath.Dir(exe), "lib", "libnccl.so.2")
	if _, err := os.Stat(next); err == nil && os.Getenv("DEEPGO_NCCL_LIB") == "" && loadedFrom != next {
		t.Fatalf("loaded %s, not %s next to the executable", loadedFrom, next)
	}
}

func TestCandidates(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DEEPGO_NCCL_LIB", dir)
	c := candidates()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "libnccl.so.2"), filepath.Join(filepath.Dir(exe), "lib", "libnccl.so.2"),
		filepath.Join(filepath.Dir(exe), "libnccl.so.2"), "libnccl.so.2"}
	if len(c) < len(want) || !slices.Equal(c[:len(want)], want) {
		t.Fatalf("candidates() = %q, want %q first", c, want)
	}
}
