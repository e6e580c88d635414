package deepgo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// get_mom() as DeepSpeed prints it: SGD's momentum (torch's int 0 when
// the config has none), the betas list the config gave, else the
// optimizer's default tuple, or OneCycle's (momentum, beta2) tuple.
func TestMomRepr(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"sgd default", `{"type": "SGD", "params": {"lr": 0.1}}`, "0"},
		{"sgd momentum", `{"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}}`, "0.9"},
		{"adam default", `{"type": "Adam", "params": {"lr": 0.001}}`, "(0.9, 0.999)"},
		{"adamw given", `{"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 0.95]}}`, "[0.9, 0.95]"},
		{"lion default", `{"type": "Lion", "params": {"lr": 0.001}}`, "(0.9, 0.99)"},
		{"lamb default", `{"type": "Lamb", "params": {"lr": 0.001}}`, "(0.9, 0.999)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(`{"train_batch_size": 1, "optimizer": ` + c.doc + `}`))
			require.NoError(t, err)
			assert.Equal(t, c.want, momRepr(cfg, testOptimizer(t, cfg), nil))
		})
	}
	cfg, err := config.Parse([]byte(`{"train_batch_size": 1, "optimizer": {"type": "Adam", "params": {"lr": 0.01, "betas": [0.9, 0.95]}},
		"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01, "cycle_first_step_size": 4}}}`))
	require.NoError(t, err)
	opt := testOptimizer(t, cfg)
	s, _, err := newSchedule(cfg, opt)
	require.NoError(t, err)
	// DeepSpeed's OneCycle writes (cycle_min_mom, 0.99) when built, then
	// (momentum, 0.99) at each step: half way up (scale 0.5) 0.9 - 0.1/2
	assert.Equal(t, "(0.8, 0.99)", momRepr(cfg, opt, s), "OneCycle's tuple as built")
	s.Step()
	s.Step()
	assert.Equal(t, "(0.8500000000000001, 0.99)", momRepr(cfg, opt, s), "half way up the first step size")
	assert.Equal(t, "[Rank 0] step=2, skipped=1, lr=[0.01], mom=[(0.8500000000000001, 0.99)]", progressLine(2, 1, 0.01, momRepr(cfg, opt, s)))

	// an optimizer passed with WithOptimizer: the config has none
	bare, err := config.Parse([]byte(`{"train_batch_size": 1}`))
	require.NoError(t, err)
	assert.Equal(t, "(0.9, 0.95)", momRepr(bare, opt, nil), "betas without a config section: the tuple")
}

// The PipelineEngine's "steps:" line: every steps_per_print batches, the
// window's mean batch time and the samples per second it gives.
func TestPipeStepsLine(t *testing.T) {
	assert.Equal(t, "steps: 10 loss: 2.5000 iter time (s): 0.250 samples/sec: 64.000", pipeStepsLine(10, 5, 16, 2.5, 1250*time.Millisecond))
	assert.Empty(t, pipeStepsLine(9, 5, 16, 2.5, time.Second), "not a multiple of steps_per_print")
	assert.Empty(t, pipeStepsLine(10, 0, 16, 2.5, time.Second), "steps_per_print unset")
}

// testOptimizer is cfg's optimizer on a CPU backend, closed with t.
func testOptimizer(t *testing.T, cfg *config.Config) optim.Optimizer {
	t.Helper()
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	t.Cleanup(func() { be.Close() })
	opt, err := optim.New(cfg.Optimizer.Type, cfg.Optimizer.Params, be)
	require.NoError(t, err)
	t.Cleanup(func() { opt.Close() })
	return opt
}

// An engine built with WithOptimizer from a config with no optimizer
// section prints its progress line with the optimizer's own betas.
func TestProgressWithOptimizer(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_batch_size": 4, "steps_per_print": 1}`))
	require.NoError(t, err)
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	opt, err := optim.New("AdamW", map[string]any{"lr": 0.5}, be)
	require.NoError(t, err)
	defer opt.Close()
	var log strings.Builder
	net := testmodel.NewMLP(1, 4, 2)
	tr, err := Initialize(context.Background(), cfg, net, WithOptimizer(opt), WithBackend(be), WithLog(&log))
	require.NoError(t, err)
	require.NoError(t, tr.Close())
	assert.Contains(t, log.String(), "[Rank 0] step=0, skipped=0, lr=[0.5], mom=[(0.9, 0.999)]\n")
}
