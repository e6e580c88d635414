package offload

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deepgo-ml/deepgo/aio"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
)

var _ optim.StateStore = (*NVMeStore)(nil)

// sub-group sizes: several params each, not multiples of 4096 bytes
var groupShapes = [][][]int{{{37, 5}, {11}}, {{1000}}, {{3, 7, 9}, {64}, {1}}, {{2500}}}

func testAIO() aio.Options {
	return aio.Options{BlockSize: 16 << 10, QueueDepth: 4, Threads: 1, OverlapEvents: true}
}

func newStore(t *testing.T, p PlanOptions, o aio.Options) *NVMeStore {
	t.Helper()
	s, err := NewNVMeStore(NVMeOptions{Path: t.TempDir(), Rank: 3, Plan: p, AIO: o})
	if err != nil && os.IsNotExist(err) {
		t.Fatal(err)
	}
	require.NoError(t, err)
	return s
}

type shard struct {
	params, grads []*tensor.Tensor
}

func makeShards(t *testing.T, seed uint64) []shard {
	r := rand.New(rand.NewPCG(seed, 9))
	var out []shard
	for _, shapes := range groupShapes {
		var s shard
		for _, shape := range shapes {
			p, err := tensor.Empty(tensor.Float32, shape...)
			require.NoError(t, err)
			g, err := tensor.Empty(tensor.Float32, shape...)
			require.NoError(t, err)
			pv, _ := p.Float32s()
			for i := range pv {
				pv[i] = float32(r.NormFloat64())
			}
			s.params, s.grads = append(s.params, p), append(s.grads, g)
		}
		out = append(out, s)
		t.Cleanup(func() {
			for i := range s.params {
				s.params[i].Free()
				s.grads[i].Free()
			}
		})
	}
	return out
}

// stepAll runs one optimizer step over every sub-group, with gradients
// drawn from step and group.
func stepAll(t *testing.T, o optim.Optimizer, shards []shard, step int) error {
	for gi, s := range shards {
		r := rand.New(rand.NewPCG(uint64(step), uint64(gi)))
		for _, g := range s.grads {
			gv, _ := g.Float32s()
			for i := range gv {
				gv[i] = float32(r.NormFloat64())
			}
		}
		grp := optim.ParamGroup{Name: fmt.Sprintf("rank3/sub%d", gi), Params: s.params, Grads: s.grads}
		if err := o.Step(grp, 1e-2, 1); err != nil {
			return err
		}
	}
	return nil
}

func raw(t *testing.T, ts []*tensor.Tensor) []byte {
	var b []byte
	for _, x := range ts {
		r, err := x.RawBytes()
		require.NoError(t, err)
		b = append(b, r...)
	}
	return b
}

// TestNVMeMatchesHost: AdamW over four sub-groups for six steps keeps its
// state on NVMe, under every pipelining, and ends bit-identical to the same
// optimizer with its state in memory: parameters and state.
func TestNVMeMatchesHost(t *testing.T) {
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	adamw := map[string]any{"lr": 1e-2, "weight_decay": 0.01}
	for _, p := range []PlanOptions{
		{Buffers: 1},
		{Buffers: 2, PipelineRead: true},
		{Buffers: 2, PipelineRead: true, PipelineWrite: true},
		{Buffers: 4, PipelineWrite: true},
		{Buffers: 3, PipelineRead: true, PipelineWrite: true},
	} {
		t.Run(fmt.Sprintf("%+v", p), func(t *testing.T) {
			host, err := optim.New("AdamW", adamw, be)
			require.NoError(t, err)
			defer host.Close()
			store := newStore(t, p, testAIO())
			nvme, err := optim.New("AdamW", adamw, be, optim.WithStateStore(store))
			require.NoError(t, err)
			a, b := makeShards(t, 1), makeShards(t, 1)
			for step := 1; step <= 6; step++ {
				require.NoError(t, stepAll(t, host, a, step))
				require.NoError(t, stepAll(t, nvme, b, step))
			}
			var total int
			for gi := range a {
				assert.True(t, bytes.Equal(raw(t, a[gi].params), raw(t, b[gi].params)), "params of sub-group %d", gi)
				name := fmt.Sprintf("rank3/sub%d", gi)
				hs, ns := host.State(name), nvme.State(name)
				require.NotNil(t, ns, name)
				for _, k := range []string{"exp_avg", "exp_avg_sq"} {
					total += len(raw(t, hs[k]))
					assert.True(t, bytes.Equal(raw(t, hs[k]), raw(t, ns[k])), "%s of %s", k, name)
				}
			}
			// host memory holds buffer_count sub-groups' state, each buffer
			// the largest sub-group's (2 moments of 2500 floats), whatever
			// the number of sub-groups
			assert.Equal(t, 2*2500*4, store.bufBytes)
			assert.Len(t, store.bufs, p.Buffers)
			assert.Equal(t, 2*4*(37*5+11+1000+3*7*9+64+1+2500), total)
			assert.Positive(t, store.Engine().Stats().Pieces)
			dir := store.Dir()
			require.DirExists(t, dir)
			require.NoError(t, nvme.Close())
			assert.NoDirExists(t, dir, "Close removes the swap folder")
		})
	}
}

// TestOutOfOrderAcquire: loading a checkpoint acquires groups in its own
// order; the store waits for what is in flight and serves it unplanned,
// then the next step is planned again.
func TestOutOfOrderAcquire(t *testing.T) {
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	store := newStore(t, PlanOptions{Buffers: 2, PipelineRead: true, PipelineWrite: true}, testAIO())
	o, err := optim.New("AdamW", map[string]any{"lr": 1e-2}, be, optim.WithStateStore(store))
	require.NoError(t, err)
	defer o.Close()
	host, err := optim.New("AdamW", map[string]any{"lr": 1e-2}, be)
	require.NoError(t, err)
	defer host.Close()
	a, b := makeShards(t, 2), makeShards(t, 2)
	for step := 1; step <= 3; step++ {
		require.NoError(t, stepAll(t, host, a, step))
		require.NoError(t, stepAll(t, o, b, step))
		// a reader between steps, in reverse order
		for gi := len(groupShapes) - 1; gi >= 0; gi-- {
			name := fmt.Sprintf("rank3/sub%d", gi)
			st, err := store.Acquire(name, []string{"exp_avg", "exp_avg_sq"}, b[gi].params)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(raw(t, host.State(name)["exp_avg"]), raw(t, st["exp_avg"])), name)
			require.NoError(t, store.Release(name))
		}
	}
	_, err = store.Acquire("rank3/sub0", []string{"exp_avg"}, b[0].params)
	assert.ErrorContains(t, err, "now asked for [exp_avg]")
	st, err := store.Acquire("rank3/sub1", []string{"exp_avg", "exp_avg_sq"}, b[1].params)
	require.NoError(t, err)
	require.NotNil(t, st)
	_, err = store.Acquire("rank3/sub2", []string{"exp_avg", "exp_avg_sq"}, b[2].params)
	assert.ErrorContains(t, err, "one sub-group at a time")
	assert.ErrorContains(t, store.Release("rank3/sub2"), "not the held group")
	require.NoError(t, store.Release("rank3/sub1"))
}

// TestCrashLeftovers: a swap folder a crashed run left is cleaned at start.
func TestCrashLeftovers(t *testing.T) {
	path := t.TempDir()
	dir := SwapDir(path, 0)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "group0.swp"), []byte("stale"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "junk"), []byte("stale"), 0o644))
	s, err := NewNVMeStore(NVMeOptions{Path: path, Rank: 0, Plan: PlanOptions{Buffers: 2}, AIO: testAIO()})
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
	require.NoError(t, s.Close())
	assert.NoDirExists(t, dir)
}

// TestSwapFaults: a full disk, a failing disk and a swap file removed under
// the run each stop the step with an error naming the file.
func TestSwapFaults(t *testing.T) {
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	for _, c := range []struct {
		name   string
		fault  aio.Fault
		remove bool
		want   error
		text   string
	}{
		{name: "enospc", fault: aio.Fault{Kind: aio.FaultErrno, Errno: syscall.ENOSPC, At: 9}, want: syscall.ENOSPC, text: ".swp at offset"},
		{name: "eio", fault: aio.Fault{Kind: aio.FaultErrno, Errno: syscall.EIO, At: 12}, want: syscall.EIO, text: ".swp at offset"},
		{name: "removed", remove: true, want: os.ErrNotExist, text: "swap file removed while training"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := testAIO()
			o.Fault = c.fault
			store := newStore(t, PlanOptions{Buffers: 2, PipelineRead: true, PipelineWrite: true}, o)
			opt, err := optim.New("AdamW", map[string]any{"lr": 1e-2}, be, optim.WithStateStore(store))
			require.NoError(t, err)
			defer opt.Close()
			shards := makeShards(t, 3)
			require.NoError(t, stepAll(t, opt, shards, 1))
			if c.remove {
				require.NoError(t, os.Remove(filepath.Join(store.Dir(), "group2.swp")))
			}
			for step := 2; step <= 4 && err == nil; step++ {
				err = stepAll(t, opt, shards, step)
			}
			require.ErrorIs(t, err, c.want)
			assert.ErrorContains(t, err, c.text)
			assert.ErrorContains(t, err, store.Dir())
		})
	}
}

func TestNVMeBadOptions(t *testing.T) {
	_, err := NewNVMeStore(NVMeOptions{Path: t.TempDir(), Plan: PlanOptions{Buffers: 0}, AIO: testAIO()})
	assert.ErrorContains(t, err, "buffer_count 0")
	_, err = NewNVMeStore(NVMeOptions{Plan: PlanOptions{Buffers: 1}, AIO: testAIO()})
	assert.ErrorContains(t, err, "nvme_path is empty")
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = NewNVMeStore(NVMeOptions{Path: file, Plan: PlanOptions{Buffers: 1}, AIO: testAIO()})
	assert.ErrorContains(t, err, "not a directory")
}

// A second live store on the same nvme_path and rank is refused: it would
// have removed the first one's swap files under it. Once the first
// closes, the path is free again (and a crashed run's lock dies with it).
func TestNVMeSwapDirInUse(t *testing.T) {
	path := t.TempDir()
	o := NVMeOptions{Path: path, Rank: 1, Plan: PlanOptions{Buffers: 1}, AIO: testAIO()}
	first, err := NewNVMeStore(o)
	require.NoError(t, err)
	_, err = NewNVMeStore(o)
	require.ErrorContains(t, err, "in use by another live run")
	_, err = os.Stat(first.Dir())
	require.NoError(t, err, "the first store's folder survived the refused second")
	require.NoError(t, first.Close())
	second, err := NewNVMeStore(o)
	require.NoError(t, err)
	require.NoError(t, second.Close())
	left, err := os.ReadDir(path)
	require.NoError(t, err)
	assert.Empty(t, left, "Close leaves nothing in nvme_path")
}

// TestStateLargerThanBuffers: twelve sub-groups whose state together is six
// times what the store keeps in memory still step, and only buffer_count
// sub-groups' state is ever resident.
func TestStateLargerThanBuffers(t *testing.T) {
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	store := newStore(t, PlanOptions{Buffers: 2, PipelineRead: true, PipelineWrite: true}, testAIO())
	o, err := optim.New("Adam", map[string]any{"lr": 1e-3}, be, optim.WithStateStore(store))
	require.NoError(t, err)
	defer o.Close()
	const groups, n = 12, 16384
	var ps, gs []*tensor.Tensor
	for range groups {
		p, err := tensor.Empty(tensor.Float32, n)
		require.NoError(t, err)
		g, err := tensor.Empty(tensor.Float32, n)
		require.NoError(t, err)
		gv, _ := g.Float32s()
		for j := range gv {
			gv[j] = 0.5
		}
		ps, gs = append(ps, p), append(gs, g)
	}
	defer func() {
		for i := range ps {
			ps[i].Free()
			gs[i].Free()
		}
	}()
	for range 3 {
		for i := range groups {
			grp := optim.ParamGroup{Name: fmt.Sprintf("sub%d", i), Params: ps[i : i+1], Grads: gs[i : i+1]}
			require.NoError(t, o.Step(grp, 1e-3, 1))
		}
	}
	state := groups * 2 * n * 4
	resident := len(store.bufs) * store.bufBytes
	assert.Equal(t, state/6, resident, "resident state bytes")
	// Adam's first three steps move every weight by lr each (the bias
	// corrections make m/sqrt(v) exactly 1 for a constant gradient)
	v, _ := ps[groups-1].Float32s()
	assert.InDelta(t, -3e-3, v[0], 1e-6)
	m := o.State("sub7")["exp_avg"][0]
	mv, _ := m.Float32s()
	assert.InDelta(t, 0.5*(1-0.9*0.9*0.9), mv[n-1], 1e-6)
}

// TestStepEndedPartWay: a step that stops after some sub-groups (an error
// elsewhere) leaves the next step planned from its first sub-group.
func TestStepEndedPartWay(t *testing.T) {
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	store := newStore(t, PlanOptions{Buffers: 2, PipelineRead: true, PipelineWrite: true}, testAIO())
	o, err := optim.New("AdamW", map[string]any{"lr": 1e-2}, be, optim.WithStateStore(store))
	require.NoError(t, err)
	defer o.Close()
	host, err := optim.New("AdamW", map[string]any{"lr": 1e-2}, be)
	require.NoError(t, err)
	defer host.Close()
	a, b := makeShards(t, 5), makeShards(t, 5)
	require.NoError(t, stepAll(t, host, a, 1))
	require.NoError(t, stepAll(t, o, b, 1))
	require.NoError(t, stepAll(t, host, a[:2], 2))
	require.NoError(t, stepAll(t, o, b[:2], 2))
	assert.Equal(t, 2, store.cursor, "the plan stopped after two sub-groups")
	for step := 3; step <= 4; step++ {
		require.NoError(t, stepAll(t, host, a, step))
		require.NoError(t, stepAll(t, o, b, step))
	}
	assert.Equal(t, -1, store.cursor, "a whole planned step")
	for gi := range a {
		assert.True(t, bytes.Equal(raw(t, a[gi].params), raw(t, b[gi].params)), "params of sub-group %d", gi)
	}
}
