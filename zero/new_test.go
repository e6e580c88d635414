package zero

import (
	"context"
	"errors"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failingEmpty is a backend whose Empty fails once ok allocations have
// succeeded: New's buffer allocation failing part way.
type failingEmpty struct {
	backend.Backend
	ok int
}

var errNoMemory = errors.New("test: out of memory")

func (b *failingEmpty) Empty(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	if b.ok <= 0 {
		return nil, errNoMemory
	}
	b.ok--
	return b.Backend.Empty(dt, shape...)
}

// New that fails at any of its steps after the layout (opening the
// parameter store, allocating the buffers, the first or a later
// allocation, initialising them) returns the error instead of panicking
// in the Close it runs on the part it built.
func TestNewFailsCleanly(t *testing.T) {
	cpu, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer cpu.Close()
	w, err := local.NewWorld(1, local.Options{})
	require.NoError(t, err)
	defer w.Close()
	base, err := optim.New("AdamW", map[string]any{"lr": 1e-3}, cpu)
	require.NoError(t, err)
	defer base.Close()

	mods := []ModuleSpec{
		{Name: "a", Params: []ParamSpec{{Name: "a.w", Shape: []int{4, 8}}, {Name: "a.b", Shape: []int{8}}}},
		{Name: "b", Params: []ParamSpec{{Name: "b.w", Shape: []int{8, 2}}}},
	}
	values := map[[2]int]*tensor.Tensor{}
	for m, mod := range mods {
		for p, ps := range mod.Params {
			v, err := tensor.Empty(tensor.Float32, ps.Numel())
			require.NoError(t, err)
			defer v.Free()
			values[[2]int{m, p}] = v
		}
	}
	initial := func(m, p int) *tensor.Tensor { return values[[2]int{m, p}] }
	storeErr := errors.New(`offload: offload_param.nvme_path "/proc/nope": mkdir /proc/nope: no such file or directory`)
	badStore := func(tensor.DType, []string, []int) (ParamStore, error) { return nil, storeErr }

	for _, tc := range []struct {
		name    string
		cfg     Config
		be      func(backend.Backend) backend.Backend
		initial func(m, p int) *tensor.Tensor
		want    error  // the cause the error wraps
		text    string // what the error says
	}{
		{name: "stage 3 param store fails", cfg: Config{Stage: 3, ParamStore: badStore},
			want: storeErr, text: "zero_optimization.offload_param: offload: offload_param.nvme_path"},
		{name: "stage 3 param store fails, fp16 with offload", cfg: Config{Stage: 3, ModelDType: tensor.Float16, ParamStore: badStore, HostOffload: cpu},
			want: storeErr, text: "zero_optimization.offload_param"},
		{name: "param store at stage 2", cfg: Config{Stage: 2, ParamStore: HostParams},
			text: "not supported: a parameter store (offload_param) at stage 2"},
		{name: "stage 3 first allocation fails", cfg: Config{Stage: 3}, be: func(b backend.Backend) backend.Backend { return &failingEmpty{Backend: b} },
			want: errNoMemory},
		{name: "stage 2 allocation fails part way", cfg: Config{Stage: 2, ModelDType: tensor.BFloat16}, be: func(b backend.Backend) backend.Backend { return &failingEmpty{Backend: b, ok: 3} },
			want: errNoMemory},
		{name: "stage 1 offload allocation fails part way", cfg: Config{Stage: 1, ModelDType: tensor.Float16, HostOffload: &failingEmpty{Backend: cpu, ok: 2}},
			want: errNoMemory},
		{name: "stage 3 initial value missing", cfg: Config{Stage: 3, ParamStore: HostParams},
			initial: func(int, int) *tensor.Tensor { return nil }, text: "has no initial value"},
		{name: "stage 0 initial value missing", cfg: Config{Stage: 0, ModelDType: tensor.BFloat16},
			initial: func(int, int) *tensor.Tensor { return nil }, text: "has no initial value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var be backend.Backend = cpu
			if tc.be != nil {
				be = tc.be(cpu)
			}
			init := initial
			if tc.initial != nil {
				init = tc.initial
			}
			var z *Optimizer
			require.NotPanics(t, func() {
				z, err = New(context.Background(), tc.cfg, w.Comm(0), be, base, mods, init)
			})
			require.Error(t, err)
			assert.Nil(t, z)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			}
			assert.Contains(t, err.Error(), tc.text)
			t.Logf("%v", err)
		})
	}
}
