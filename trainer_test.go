package deepgo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeDevice is a CPU backend that claims to live on a GPU.
type fakeDevice struct{ *backend.CPU }

func (fakeDevice) Device() tensor.Device { return tensor.CUDA(0) }

// A backend on a device that brings no collectives over its memory
// (DeviceComm), given without a comm bound to that device, is refused with a
// clear error: comm/local would read device memory as host memory.
func TestInitializeRefusesDeviceBackendWithoutComm(t *testing.T) {
	cpu, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer cpu.Close()
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`))
	require.NoError(t, err)
	m := testmodel.NewMLP(1, 4, 3)
	defer m.FreeUndonated()
	_, err = deepgo.Initialize(context.Background(), cfg, m, deepgo.WithBackend(fakeDevice{cpu}))
	require.ErrorContains(t, err, "not supported", "Initialize on a device backend")
	require.ErrorContains(t, err, "cuda:0", "Initialize on a device backend")
	require.ErrorContains(t, err, "WithComm", "Initialize on a device backend")
}

// Inside a local.Run of several ranks, an engine without WithComm (nor
// tensor or sequence parallel groups) would train each rank alone as a world
// of one, every rank writing the monitor files as rank 0: refused, saying
// what to pass. With the rank's comm it trains; a Run of one rank may omit it.
func TestInitializeRefusesWorldOfOneInsideRun(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`))
	require.NoError(t, err)
	for _, c := range []struct {
		n        int
		withComm bool
		want     string
	}{
		{2, false, "no WithComm inside a comm/local.Run of 2 ranks: each rank would train alone"},
		{2, true, ""},
		{1, false, ""},
	} {
		t.Run(fmt.Sprintf("n%d_comm%v", c.n, c.withComm), func(t *testing.T) {
			errs := make([]error, c.n)
			worlds := make([]int, c.n)
			err := local.Run(context.Background(), c.n, local.Options{Timeout: 10 * time.Second}, func(ctx context.Context, cm comm.Comm) error {
				m := testmodel.NewMLP(1, 4, 3)
				defer m.FreeUndonated()
				var opts []deepgo.Option
				if c.withComm {
					opts = append(opts, deepgo.WithComm(cm))
				}
				tr, err := deepgo.Initialize(ctx, cfg, m, opts...)
				errs[cm.Rank()] = err
				if err != nil {
					return nil
				}
				worlds[cm.Rank()] = tr.BatchSizes().DataParallel
				return tr.Close()
			})
			require.NoError(t, err)
			for r, err := range errs {
				if c.want != "" {
					assert.ErrorContains(t, err, c.want, "rank %d", r)
					assert.ErrorContains(t, err, "deepgo.WithComm(c)", "rank %d", r)
					continue
				}
				assert.NoError(t, err, "rank %d", r)
				assert.Equal(t, c.n, worlds[r], "rank %d: data-parallel size", r)
			}
		})
	}
}

// Initialize chooses the engine from the config: the data-parallel engine
// without pipeline stages, the pipeline engine with them, which needs a
// model.Pipelined (the MLP is not one: a clear error naming the key, the
// value and the model). nn's pipeline tests train the GPT through it.
func TestInitializeChoosesEngine(t *testing.T) {
	cases := []struct {
		name    string
		extra   string
		wantErr string
	}{
		{"data parallel", ``, ""},
		{"pipeline", `, "pipeline_model_parallel_size": 2`, "pipeline_model_parallel_size 2: not supported for this model (*testmodel.MLP)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}` + c.extra + `}`))
			require.NoError(t, err)
			m := testmodel.NewMLP(1, 4, 3)
			defer m.FreeUndonated()
			tr, err := deepgo.Initialize(context.Background(), cfg, m)
			if c.wantErr != "" {
				require.ErrorContains(t, err, c.wantErr, "Initialize")
				require.Nil(t, tr, "Initialize returned a non-nil Trainer %T with its error", tr)
				return
			}
			require.NoError(t, err)
			defer tr.Close()
			require.IsType(t, &deepgo.Engine{}, tr, "Initialize")
		})
	}
}

// Initialize refuses a config that is not one Parse accepts: one Parse
// returned with errors (its bad values replaced by defaults: stage 4 would
// have trained at stage 0) and one whose fields were set out of range in Go
// after loading. Each error names the JSON path.
func TestInitializeRefusesInvalidConfig(t *testing.T) {
	const good = `{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}`
	parsedWithErrors, err := config.Parse([]byte(good + `, "zero_optimization": {"stage": 4}}`))
	require.Error(t, err)
	require.NotNil(t, parsedWithErrors, "Parse returns the partial config with its errors")
	cases := []struct {
		name string
		cfg  func(t *testing.T) *config.Config
		want string
	}{
		{"parsed with errors", func(*testing.T) *config.Config { return parsedWithErrors }, "zero_optimization.stage: got 4"},
		{"clipping set negative", func(t *testing.T) *config.Config {
			c, err := config.Parse([]byte(good + `}`))
			require.NoError(t, err)
			c.GradientClipping = -3
			return c
		}, "gradient_clipping: got -3"},
		{"scale power out of range", func(t *testing.T) *config.Config {
			c, err := config.Parse([]byte(good + `, "fp16": {"enabled": true}}`))
			require.NoError(t, err)
			c.FP16.InitialScalePower = 200
			return c
		}, "fp16.initial_scale_power: got 200"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := testmodel.NewMLP(1, 4, 3)
			defer m.FreeUndonated()
			tr, err := deepgo.Initialize(context.Background(), c.cfg(t), m)
			require.ErrorContains(t, err, "deepgo.Initialize: the config is not valid")
			require.ErrorContains(t, err, c.want)
			var es config.Errors
			require.ErrorAs(t, err, &es)
			require.Nil(t, tr)
		})
	}
}

// A micro-batch whose size disagrees with train_micro_batch_size_per_gpu
// is refused before any module runs, naming both numbers.
func TestMicroBatchSizeChecked(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`))
	require.NoError(t, err)
	tr, err := deepgo.Initialize(context.Background(), cfg, testmodel.NewMLP(1, 4, 3))
	require.NoError(t, err)
	defer tr.Close()
	data := testmodel.NewDataset(1, 16, 4, 3)
	for _, n := range []int{1, 2, 3} {
		_, err := tr.TrainBatch(context.Background(), []model.MicroBatch{data.Micro(0, 8, 0, n)})
		if n == 2 {
			assert.NoError(t, err, "%d samples", n)
		} else {
			assert.ErrorContains(t, err, fmt.Sprintf("holds %d samples, train_micro_batch_size_per_gpu is 2", n), "%d samples", n)
		}
	}
	assert.Equal(t, 1, tr.GlobalSteps(), "global steps after one good batch")
}

// backendProbe is a one-module model that records the backend its Forward
// finds in the context.
type backendProbe struct {
	*testmodel.MLP
	seen []backend.Backend
}

func (p *backendProbe) Modules() []model.Module {
	return []model.Module{probeModule{p.MLP.Layers[0], p}}
}

type probeModule struct {
	*testmodel.Linear
	p *backendProbe
}

func (m probeModule) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	b, _ := backend.FromContext(ctx)
	m.p.seen = append(m.p.seen, b)
	return m.Linear.Forward(ctx, in)
}

// A module reaches the engine's backend through its context; without
// WithBackend that is the comm's CPU pool (the thread count's one place).
func TestModulesReachTheBackend(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}`))
	require.NoError(t, err)
	err = local.Run(context.Background(), 1, local.Options{Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		own, err := backend.NewCPU(2)
		if err != nil {
			return err
		}
		defer own.Close()
		carried := c.(interface{ Backend() backend.Backend }).Backend()
		for _, tc := range []struct {
			opts []deepgo.Option
			want backend.Backend
		}{
			{[]deepgo.Option{deepgo.WithComm(c)}, carried},
			{[]deepgo.Option{deepgo.WithComm(c), deepgo.WithBackend(own)}, own},
		} {
			p := &backendProbe{MLP: testmodel.NewMLP(1, 4, 3)}
			tr, err := deepgo.Initialize(ctx, cfg, p, tc.opts...)
			if err != nil {
				return err
			}
			_, err = tr.TrainBatch(ctx, []model.MicroBatch{testmodel.NewDataset(1, 8, 4, 3).Micro(0, 2, 0, 2)})
			tr.Close()
			if err != nil {
				return err
			}
			if len(p.seen) != 1 || p.seen[0] != tc.want {
				return fmt.Errorf("module saw backends %v, want [%v]", p.seen, tc.want.Name())
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// A rank that skips a step makes the others fail within the group's
// timeout with an error that says a rank did not join the step (not a
// module-order problem), naming the missing rank.
func TestRankSkipsStep(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_batch_size": 4, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "zero_optimization": {"stage": 2}}`))
	require.NoError(t, err)
	data := testmodel.NewDataset(1, 16, 4, 3)
	var errs [2]error
	_ = local.Run(context.Background(), 2, local.Options{Timeout: 300 * time.Millisecond}, func(ctx context.Context, c comm.Comm) error {
		tr, err := deepgo.Initialize(ctx, cfg, testmodel.NewMLP(1, 4, 3), deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer tr.Close()
		if c.Rank() == 1 {
			return nil // skips the step
		}
		_, errs[0] = tr.TrainBatch(ctx, data.RankBatch(0, 4, 2, 0, 1))
		return errs[0]
	})
	require.ErrorContains(t, errs[0], "not every data-parallel rank joined this step", "rank 0")
	require.ErrorContains(t, errs[0], "ranks [1]", "rank 0")

	t.Log(errs[0])
}

// pipeline.stages (PipelineModule's num_stages) asks for a pipeline like
// pipeline_model_parallel_size; the two disagreeing is an error naming
// both, and a fractional count is refused.
func TestPipelineStages(t *testing.T) {
	cases := []struct {
		doc     string
		want    int
		wantErr string
	}{
		{`{}`, 1, ""},
		{`{"pipeline_model_parallel_size": 4}`, 4, ""},
		{`{"pipeline": {"stages": 2}}`, 2, ""},
		{`{"pipeline": {"stages": "auto"}, "pipeline_model_parallel_size": 2}`, 2, ""},
		{`{"pipeline": {"stages": 2}, "pipeline_model_parallel_size": 2}`, 2, ""},
		{`{"pipeline": {"stages": 2}, "pipeline_model_parallel_size": 4}`, 0, "pipeline.stages 2 and pipeline_model_parallel_size 4"},
		{`{"pipeline": {"stages": 2.5}}`, 0, "pipeline.stages"}, // the config reader refuses it
		{`{"pipeline": {"stages": "3"}}`, 0, "pipeline.stages"},
	}
	for _, c := range cases {
		cfg, err := config.Parse([]byte(c.doc))
		if c.wantErr == "pipeline.stages" {
			assert.ErrorContains(t, err, `pipeline.stages`, c.doc)
			continue
		}
		require.NoError(t, err, c.doc)
		got, err := deepgo.PipelineStages(cfg)
		if c.wantErr != "" {
			assert.ErrorContains(t, err, c.wantErr, c.doc)
			continue
		}
		assert.NoError(t, err, c.doc)
		assert.Equal(t, c.want, got, c.doc)
	}
}
