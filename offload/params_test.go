package offload

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/deepgo-ml/deepgo/aio"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newSwapper(t *testing.T, o ParamSwapOptions, sizes []int) *ParamSwapper {
	t.Helper()
	if o.Path == "" {
		o.Path = t.TempDir()
	}
	if o.AIO == (aio.Options{}) {
		o.AIO = testAIO()
	}
	names := make([]string, len(sizes))
	for u := range sizes {
		names[u] = string(rune('a' + u))
	}
	s, err := NewParamSwapper(o, tensor.Float32, names, sizes)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// fillWith returns a Write fill setting element i to base+i.
func fillWith(base float32) func(*tensor.Tensor) error {
	return func(dst *tensor.Tensor) error {
		v, err := dst.Float32s()
		for i := range v {
			v[i] = base + float32(i)
		}
		return err
	}
}

func requireHolds(t *testing.T, s *ParamSwapper, u, n int, base float32) {
	t.Helper()
	got, err := s.Acquire(context.Background(), u)
	require.NoError(t, err)
	defer s.Release(u)
	v, err := got.Float32s()
	require.NoError(t, err)
	require.Len(t, v, n)
	for i := range v {
		require.Equal(t, base+float32(i), v[i], "partition %d element %d", u, i)
	}
}

// Partitions come back as written, whether kept by max_in_cpu or swapped,
// read on demand or ahead; a write drops a stale copy read ahead; at most
// buffer_count swapped partitions are held at once; the host memory is
// the kept partitions and the buffers (sized for the largest swapped
// partition, not buffer_size); Close removes the folder.
func TestParamSwapperRoundTrip(t *testing.T) {
	ctx := context.Background()
	sizes := []int{300, 5000, 70, 1200}
	s := newSwapper(t, ParamSwapOptions{BufferCount: 2, BufferSize: 8192, MaxInCPU: 400}, sizes)
	for u, n := range sizes {
		require.NoError(t, s.Write(ctx, u, fillWith(float32(1000*u))), "partition %d of %d", u, n)
	}
	st := s.Stats()
	assert.Equal(t, ParamSwapStats{Writes: 2, InCPU: 2, Swapped: 2}, st, "partitions 0 and 2 kept (370 <= max_in_cpu), 1 and 3 swapped")
	resident, peak, disk := s.SwapUsage()
	assert.Equal(t, int64(370*4+2*20480), resident, "kept partitions + 2 buffers of 5000 fp32 rounded to 4 KiB")
	assert.Equal(t, resident, peak)
	assert.Equal(t, int64(6200*4), disk)

	require.NoError(t, s.Prefetch(ctx, 3))
	for u, n := range sizes {
		requireHolds(t, s, u, n, float32(1000*u))
	}
	st = s.Stats()
	assert.Equal(t, int64(2), st.Reads)
	assert.Equal(t, int64(1), st.Prefetched)

	require.NoError(t, s.Prefetch(ctx, 1))
	require.NoError(t, s.Write(ctx, 1, fillWith(-7)))
	requireHolds(t, s, 1, 5000, -7)

	_, err := s.Acquire(ctx, 1)
	require.NoError(t, err)
	_, err = s.Acquire(ctx, 1)
	assert.ErrorContains(t, err, "acquired twice")
	_, err = s.Acquire(ctx, 3)
	require.NoError(t, err)
	require.NoError(t, s.Prefetch(ctx, 0), "a prefetch with every buffer held does nothing")
	assert.ErrorContains(t, s.Write(ctx, 3, fillWith(0)), "written while acquired")
	s.Release(1)
	s.Release(3)

	dir := s.Dir()
	require.DirExists(t, dir)
	require.NoError(t, s.Close())
	assert.NoDirExists(t, dir)
}

// Every partition within max_in_cpu: no file, no engine, no folder.
func TestParamSwapperAllInCPU(t *testing.T) {
	path := t.TempDir()
	s := newSwapper(t, ParamSwapOptions{Path: path, BufferCount: 1, BufferSize: 1, MaxInCPU: 1000}, []int{10, 20})
	require.NoError(t, s.Write(context.Background(), 1, fillWith(3)))
	requireHolds(t, s, 1, 20, 3)
	assert.Equal(t, "", s.Dir())
	assert.Equal(t, 2, s.Buffers(), "nothing swapped: every partition can be held")
	left, err := os.ReadDir(path)
	require.NoError(t, err)
	assert.Empty(t, left)
}

// Options the swapper cannot honour are refused naming the key and value.
func TestParamSwapperBadOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		o    ParamSwapOptions
		want string
	}{
		{"partition over buffer_size", ParamSwapOptions{BufferCount: 2, BufferSize: 100}, "not supported: partition b has 200 elements, more than zero_optimization.offload_param.buffer_size=100"},
		{"no buffers", ParamSwapOptions{BufferCount: 0, BufferSize: 100}, "buffer_count 0"},
		{"no path", ParamSwapOptions{BufferCount: 1, BufferSize: 1000}, "nvme_path is empty"},
		{"path is a file", ParamSwapOptions{BufferCount: 1, BufferSize: 1000}, "offload_param.nvme_path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			switch c.name {
			case "no path":
			case "path is a file":
				o.Path = filepath.Join(t.TempDir(), "f")
				require.NoError(t, os.WriteFile(o.Path, nil, 0o644))
			default:
				o.Path = t.TempDir()
			}
			_, err := NewParamSwapper(o, tensor.Float32, []string{"a", "b"}, []int{50, 200})
			assert.ErrorContains(t, err, c.want)
		})
	}
}

// A failing read or write is reported naming the partition, the swap file
// and the partition's offset in it, with the cause.
func TestParamSwapperFaults(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		at   int64
		op   string
	}{
		{"write", 1, "write of parameter partition b"},
		{"read", 3, "read of parameter partition b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := ParamSwapOptions{BufferCount: 1, BufferSize: 8192, AIO: testAIO()}
			o.AIO.Fault = aio.Fault{Kind: aio.FaultErrno, Errno: syscall.EIO, At: c.at}
			s := newSwapper(t, o, []int{1000, 2000})
			err := s.Write(ctx, 0, fillWith(1)) // piece 0
			if err == nil {
				err = s.Write(ctx, 1, fillWith(2)) // piece 1
			}
			if err == nil {
				_, err = s.Acquire(ctx, 0) // piece 2
				s.Release(0)
			}
			if err == nil {
				_, err = s.Acquire(ctx, 1) // piece 3
			}
			require.ErrorIs(t, err, syscall.EIO)
			assert.ErrorContains(t, err, c.op)
			assert.ErrorContains(t, err, s.Dir()+"/params.swp at offset 4096")
		})
	}
}
