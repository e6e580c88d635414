package aio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deepgo-ml/deepgo/config"
)

const testBlock = 64 << 10

var backends = []Backend{BackendThreads, BackendURing}

// open starts an engine on b with o's other settings, skipping io_uring
// where the kernel refuses it, and falling back to buffered files (with a
// note) when the test directory's file system has no O_DIRECT.
func open(t *testing.T, b Backend, o Options) (*Engine, string) {
	t.Helper()
	if o.BlockSize == 0 {
		o.BlockSize = testBlock
	}
	if o.QueueDepth == 0 {
		o.QueueDepth = 4
	}
	if o.Threads == 0 {
		o.Threads = 2
	}
	o.Backend = b
	dir := t.TempDir()
	e, err := Open(o)
	if b == BackendURing && err != nil && strings.Contains(err.Error(), "not supported") {
		t.Skipf("io_uring unavailable: %v", err)
	}
	require.NoError(t, err)
	probe, err := e.OpenFile(filepath.Join(dir, "probe"), os.O_RDWR|os.O_CREATE)
	if errors.Is(err, ErrNoDirect) {
		t.Logf("%s has no O_DIRECT; testing buffered files", dir)
		require.NoError(t, e.Close())
		o.Buffered = true
		e, err = Open(o)
		require.NoError(t, err)
	} else {
		require.NoError(t, err)
		require.NoError(t, probe.Close())
	}
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	return e, dir
}

func randomBuffer(t *testing.T, e *Engine, n int, seed uint64) *Buffer {
	t.Helper()
	b, err := e.NewBuffer(n)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Free()) })
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b.Bytes()[:n] {
		b.Bytes()[i] = byte(r.Uint32())
	}
	return b
}

// waitFor(t)(f.ReadAt(...)) submits and waits: a submission error fails the
// test, the transfer's error is returned
func waitFor(t *testing.T) func(*Request, error) error {
	return func(r *Request, err error) error {
		t.Helper()
		require.NoError(t, err)
		return r.Wait(context.Background())
	}
}

func TestRoundTrip(t *testing.T) {
	sizes := []int{1, 4095, 4096, 4097, 3*testBlock + 123, 10 * testBlock}
	for _, b := range backends {
		for _, o := range []Options{{}, {QueueDepth: 1, Threads: 1}, {SingleSubmit: true}, {OverlapEvents: true, QueueDepth: 16}} {
			t.Run(fmt.Sprintf("%s/qd%d/single%v/overlap%v", b, o.QueueDepth, o.SingleSubmit, o.OverlapEvents), func(t *testing.T) {
				e, dir := open(t, b, o)
				assert.Equal(t, b, e.Backend())
				f, err := e.OpenFile(filepath.Join(dir, "rt"), os.O_RDWR|os.O_CREATE|os.O_TRUNC)
				require.NoError(t, err)
				for i, n := range sizes {
					w := randomBuffer(t, e, n, uint64(i))
					off := int64(i) * 16 * testBlock
					require.NoError(t, waitFor(t)(f.WriteAt(w, n, off)), "write %d bytes", n)
					r, err := e.NewBuffer(n)
					require.NoError(t, err)
					require.NoError(t, waitFor(t)(f.ReadAt(r, n, off)), "read %d bytes", n)
					assert.True(t, bytes.Equal(w.Bytes()[:n], r.Bytes()[:n]), "%d bytes came back different", n)
					if !e.buffered {
						pad := r.Bytes()[n:padded(n)]
						assert.True(t, bytes.Equal(pad, make([]byte, len(pad))), "padding of %d bytes is zeroed on write", n)
					}
					require.NoError(t, r.Free())
				}
				size, err := f.Size()
				require.NoError(t, err)
				last := int64(len(sizes)-1)*16*testBlock + int64(sizes[len(sizes)-1])
				assert.Equal(t, last, size)
				require.NoError(t, f.Close())
			})
		}
	}
}

// 64 goroutines, each its own region, all requests in flight together
func TestConcurrentRequests(t *testing.T) {
	for _, b := range backends {
		t.Run(b.String(), func(t *testing.T) {
			e, dir := open(t, b, Options{QueueDepth: 8, Threads: 2, OverlapEvents: true})
			f, err := e.OpenFile(filepath.Join(dir, "many"), os.O_RDWR|os.O_CREATE)
			require.NoError(t, err)
			const workers, each = 64, 2*testBlock + 5000
			stride := int64(padded(each))
			var wg sync.WaitGroup
			errs := make([]error, workers)
			for i := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w := randomBuffer(t, e, each, uint64(100+i))
					r, err := e.NewBuffer(each)
					if err != nil {
						errs[i] = err
						return
					}
					defer func() { _ = r.Free() }()
					req, err := f.WriteAt(w, each, int64(i)*stride)
					if err == nil {
						err = req.Wait(context.Background())
					}
					if err == nil {
						req, err = f.ReadAt(r, each, int64(i)*stride)
					}
					if err == nil {
						err = req.Wait(context.Background())
					}
					if err == nil && !bytes.Equal(w.Bytes()[:each], r.Bytes()[:each]) {
						err = fmt.Errorf("worker %d: data differs", i)
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			for _, err := range errs {
				assert.NoError(t, err)
			}
			assert.Equal(t, int64(2*workers*3), e.Stats().Pieces)
		})
	}
}

func TestFaults(t *testing.T) {
	const n = 4 * testBlock
	cases := []struct {
		name    string
		fault   Fault
		write   bool
		wantIs  error // nil: the transfer succeeds
		offset  int64
		resumed int64
		retries int64
	}{
		{name: "enospc on write", fault: Fault{Kind: FaultErrno, Errno: syscall.ENOSPC, At: 2}, write: true, wantIs: syscall.ENOSPC, offset: 2 * testBlock},
		{name: "eio on read", fault: Fault{Kind: FaultErrno, Errno: syscall.EIO, At: 1}, wantIs: syscall.EIO, offset: testBlock},
		{name: "short read resumed", fault: Fault{Kind: FaultShort, At: 3}, resumed: 1},
		{name: "short write resumed", fault: Fault{Kind: FaultShort, At: 1}, write: true, resumed: 1},
		{name: "eintr retried", fault: Fault{Kind: FaultErrno, Errno: syscall.EINTR, At: 0}, retries: 1},
		{name: "read meets end of file", fault: Fault{Kind: FaultEOF, At: 3}, wantIs: io.ErrUnexpectedEOF, offset: 3 * testBlock},
	}
	for _, b := range backends {
		for _, c := range cases {
			t.Run(b.String()+"/"+c.name, func(t *testing.T) {
				fault := c.fault
				if !c.write {
					fault.At += n / testBlock // the results of the fault-free write come first
				}
				e, dir := open(t, b, Options{QueueDepth: 1, Threads: 1, Fault: fault})
				path := filepath.Join(dir, "fault")
				f, err := e.OpenFile(path, os.O_RDWR|os.O_CREATE)
				require.NoError(t, err)
				w := randomBuffer(t, e, n, 3)
				r := randomBuffer(t, e, n, 4)
				err = waitFor(t)(f.WriteAt(w, n, 0))
				if !c.write {
					require.NoError(t, err)
					err = waitFor(t)(f.ReadAt(r, n, 0))
				}
				st := e.Stats()
				assert.Equal(t, c.resumed, st.Resumed, "short transfers resumed")
				assert.Equal(t, c.retries, st.Retries, "EINTR retries")
				if c.wantIs == nil {
					require.NoError(t, err)
					require.NoError(t, waitFor(t)(f.ReadAt(r, n, 0)))
					assert.True(t, bytes.Equal(w.Bytes(), r.Bytes()), "data after the fault")
					return
				}
				require.ErrorIs(t, err, c.wantIs)
				var ae *Error
				require.ErrorAs(t, err, &ae)
				assert.Equal(t, path, ae.Path)
				assert.Equal(t, c.offset, ae.Offset)
				assert.Contains(t, err.Error(), path)
				assert.Contains(t, err.Error(), fmt.Sprintf("offset %d", c.offset))
			})
		}
	}
}

func TestReadPastEnd(t *testing.T) {
	for _, b := range backends {
		t.Run(b.String(), func(t *testing.T) {
			e, dir := open(t, b, Options{})
			f, err := e.OpenFile(filepath.Join(dir, "short"), os.O_RDWR|os.O_CREATE)
			require.NoError(t, err)
			buf := randomBuffer(t, e, 3*testBlock, 1)
			require.NoError(t, waitFor(t)(f.WriteAt(buf, testBlock, 0)))
			err = waitFor(t)(f.ReadAt(buf, 3*testBlock, 0))
			require.ErrorIs(t, err, io.ErrUnexpectedEOF)
			var ae *Error
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, int64(testBlock), ae.Offset)
		})
	}
}

func TestBadArguments(t *testing.T) {
	good := Options{BlockSize: testBlock, QueueDepth: 4, Threads: 1}
	for _, c := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"block", func(o *Options) { o.BlockSize = 1000 }, "block_size 1000"},
		{"depth", func(o *Options) { o.QueueDepth = 0 }, "queue_depth 0"},
		{"threads", func(o *Options) { o.Threads = 0 }, "intra_op_parallelism 0"},
		{"backend", func(o *Options) { o.Backend = 7 }, "backend 7"},
		{"fault", func(o *Options) { o.Fault.Kind = FaultErrno }, "without an errno"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := good
			c.edit(&o)
			_, err := Open(o)
			require.ErrorContains(t, err, c.want)
		})
	}
	t.Setenv(EnvBackend, "bogus")
	_, err := Open(good)
	require.ErrorContains(t, err, `DEEPGO_AIO="bogus"`)

	e, dir := open(t, BackendThreads, Options{})
	f, err := e.OpenFile(filepath.Join(dir, "args"), os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	buf := randomBuffer(t, e, 8192, 1)
	_, err = f.ReadAt(buf, 8193, 0)
	assert.ErrorContains(t, err, "n 8193")
	if !e.buffered {
		_, err = f.ReadAt(buf, 4096, 100)
		assert.ErrorContains(t, err, "offset 100")
	}
	_, err = e.OpenFile(filepath.Join(dir, "x"), os.O_APPEND)
	assert.ErrorContains(t, err, "only O_RDONLY")
	_, err = e.OpenFile(filepath.Join(dir, "missing"), os.O_RDONLY)
	assert.ErrorIs(t, err, os.ErrNotExist)
	ro, err := e.OpenFile(filepath.Join(dir, "args"), os.O_RDONLY)
	require.NoError(t, err)
	err = waitFor(t)(ro.WriteAt(buf, 4096, 0))
	assert.ErrorIs(t, err, syscall.EBADF, "a write to a read-only file fails at the engine")
	require.NoError(t, e.Close())
	_, err = f.ReadAt(buf, 4096, 0)
	assert.ErrorIs(t, err, ErrClosed)
}

func TestEnvForcesThreads(t *testing.T) {
	t.Setenv(EnvBackend, "threads")
	e, err := Open(Options{BlockSize: testBlock, QueueDepth: 2, Threads: 1})
	require.NoError(t, err)
	defer e.Close()
	assert.Equal(t, BackendThreads, e.Backend())
}

func TestWaitHonoursContext(t *testing.T) {
	e, dir := open(t, BackendThreads, Options{})
	f, err := e.OpenFile(filepath.Join(dir, "ctx"), os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	buf := randomBuffer(t, e, testBlock, 1)
	req, err := f.WriteAt(buf, testBlock, 0)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// the request may already be done; a cancelled wait must not hide that
	if err := req.Wait(ctx); err != nil {
		assert.ErrorIs(t, err, context.Canceled)
	}
	assert.NoError(t, req.Err())
}

func TestFromConfig(t *testing.T) {
	c, err := config.Parse([]byte(`{"train_batch_size":1,"aio":{"block_size":131072,"queue_depth":16,"intra_op_parallelism":2,"single_submit":true,"overlap_events":false}}`))
	require.NoError(t, err)
	o := FromConfig(c.AIO)
	assert.Equal(t, Options{BlockSize: 131072, QueueDepth: 16, Threads: 2, SingleSubmit: true}, o)
}

// A fault armed on a running engine counts from then, only the transfers
// of its op: a write fault skips the reads before it, a read fault the
// writes, and Fault{} disarms. The byte counters and busy time follow the
// requests submitted.
func TestInjectFaultAtRunTime(t *testing.T) {
	const n = 2 * testBlock
	for _, b := range backends {
		t.Run(b.String(), func(t *testing.T) {
			e, dir := open(t, b, Options{QueueDepth: 1, Threads: 1})
			path := filepath.Join(dir, "armed")
			f, err := e.OpenFile(path, os.O_RDWR|os.O_CREATE)
			require.NoError(t, err)
			buf := randomBuffer(t, e, n, 5)
			wait := waitFor(t)
			require.NoError(t, wait(f.WriteAt(buf, n, 0)))

			require.NoError(t, e.InjectFault(Fault{Kind: FaultErrno, Errno: syscall.ENOSPC, Op: FaultWrite, At: 1}))
			require.NoError(t, wait(f.ReadAt(buf, n, 0)), "a read while a write fault is armed")
			err = wait(f.WriteAt(buf, n, 0))
			require.ErrorIs(t, err, syscall.ENOSPC)
			assert.Contains(t, err.Error(), fmt.Sprintf("write %s at offset %d", path, testBlock))

			require.NoError(t, e.InjectFault(Fault{Kind: FaultErrno, Errno: syscall.EIO, Op: FaultRead}))
			require.NoError(t, wait(f.WriteAt(buf, n, 0)), "a write while a read fault is armed")
			require.ErrorIs(t, wait(f.ReadAt(buf, n, 0)), syscall.EIO)

			require.NoError(t, e.InjectFault(Fault{}))
			require.NoError(t, wait(f.ReadAt(buf, n, 0)), "after disarming")

			st := e.Stats()
			assert.Equal(t, int64(3*n), st.ReadBytes, "ReadBytes")
			assert.Equal(t, int64(3*n), st.WriteBytes, "WriteBytes")
			assert.Positive(t, st.Busy, "Busy")

			require.ErrorContains(t, e.InjectFault(Fault{Kind: FaultErrno, Op: FaultRead}), "without an errno")
			require.ErrorContains(t, e.InjectFault(Fault{Kind: FaultShort, Op: 7}), "fault op 7")
		})
	}
}
