package checkpoint

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// testParams is the model the synthetic states describe.
var testParams = []ParamRef{
	{Name: "layer0.weight", Shape: []int{3, 5}},
	{Name: "layer0.bias", Shape: []int{7}},
	{Name: "layer1.weight", Shape: []int{4, 4}},
}

const testAlign = 2

// testNumel is the unpadded length of the flat master vector.
func testNumel() int64 {
	var n int64
	for _, p := range testParams {
		n += p.Numel()
	}
	return n
}

// masterValue is element i of the flat fp32 master vector at step.
func masterValue(step int64, i int64) float32 {
	return float32(i)*0.25 - float32(step) + 0.125
}

// synthState builds rank's state of a ZeRO-like run of world ranks at
// step: sharded fp32 master weights and exp_avg (float32), a sharded
// bf16 vector, and on rank 0 whole tensors of several dtypes.
func synthState(t testing.TB, rank, world int, step int64) *State {
	t.Helper()
	n := testNumel()
	off, m := Partition(n, world, rank, testAlign)
	st := &State{Step: step, ZeroStage: 2, Topology: map[string]int{"data": world}, Config: json.RawMessage(`{"train_batch_size":8}`)}
	var o int64
	for _, p := range testParams {
		p.Source, p.Offset = "fp32/master", o
		o += p.Numel()
		st.Params = append(st.Params, p)
	}
	master := mustEmpty(t, tensor.Float32, int(m))
	avg := mustEmpty(t, tensor.Float32, int(m))
	half := mustEmpty(t, tensor.BFloat16, int(m))
	ms, _ := master.Float32s()
	as, _ := avg.Float32s()
	hs, _ := half.Uint16s()
	for i := range ms {
		g := off + int64(i)
		if g < n {
			ms[i] = masterValue(step, g)
			as[i] = -masterValue(step, g) / 3
			hs[i] = tensor.Float32ToBFloat16(masterValue(step, g))
		}
	}
	st.Tensors = []Entry{
		{Name: "fp32/master", File: "optim", Data: master, Shard: &Shard{Numel: n, Offset: off}},
		{Name: "exp_avg/master", File: "optim", Data: avg, Shard: &Shard{Numel: n, Offset: off}},
		{Name: "bf16/params", File: "model", Data: half, Shard: &Shard{Numel: n, Offset: off}},
	}
	if rank == 0 {
		i64 := mustEmpty(t, tensor.Int64, 3)
		v, _ := i64.Int64s()
		copy(v, []int64{step, -1 << 40, 7})
		u8 := mustEmpty(t, tensor.Uint8, 5)
		b, _ := u8.RawBytes()
		copy(b, "deepg")
		f64 := mustEmpty(t, tensor.Float64, 2, 2)
		d, _ := f64.Float64s()
		copy(d, []float64{1.5, -2, float64(step), 1e300})
		st.Tensors = append(st.Tensors,
			Entry{Name: "counters", File: "model", Data: i64},
			Entry{Name: "bytes", File: "model", Data: u8},
			Entry{Name: "f64", Data: f64})
	}
	st.SetMeta("rng", map[string]int64{"seed": int64(rank)*1000 + step})
	st.SetMeta("scaler", map[string]float64{"scale": 65536})
	t.Cleanup(func() { freeState(st) })
	return st
}

func freeState(st *State) {
	for _, e := range st.Tensors {
		e.Data.Free()
	}
}

func mustEmpty(t testing.TB, dt tensor.DType, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.Empty(dt, shape...)
	require.NoError(t, err)
	return x
}

// newWorld makes an in-process world of n ranks.
func newWorld(t testing.TB, n int, timeout time.Duration) []comm.Comm {
	t.Helper()
	w, err := local.NewWorld(n, local.Options{Timeout: timeout, Threads: 1})
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	cs := make([]comm.Comm, n)
	for r := range cs {
		cs[r] = w.Comm(r)
	}
	return cs
}

// onAll runs fn on every rank concurrently and returns each rank's error.
func onAll(cs []comm.Comm, fn func(r int, c comm.Comm) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r, c)
		}()
	}
	wg.Wait()
	return errs
}

func mustAll(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// saveWorld saves a synthetic state of world ranks at step into dir.
func saveWorld(t testing.TB, dir string, world int, step int64, o Options) {
	t.Helper()
	cs := newWorld(t, world, 20*time.Second)
	states := make([]*State, world)
	for r := range states {
		states[r] = synthState(t, r, world, step)
	}
	mustAll(t, onAll(cs, func(r int, c comm.Comm) error {
		oo := o
		oo.Dir, oo.Comm = dir, c
		_, err := Save(context.Background(), oo, states[r])
		return err
	}))
}

// checkMaster reads the master vector of the checkpoint in dir and
// compares it with the values of step.
func checkMaster(t testing.TB, ck *Checkpoint, step int64) {
	t.Helper()
	x, err := ck.ReadTensor(context.Background(), "fp32/master")
	require.NoError(t, err)
	defer x.Free()
	v, _ := x.Float32s()
	require.EqualValues(t, testNumel(), len(v), "master elements")
	for i, f := range v {
		if f != masterValue(step, int64(i)) {
			require.Failf(t, "master differs", "master[%d] = %v, want %v", i, f, masterValue(step, int64(i)))
		}
	}
}
