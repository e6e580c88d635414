package optim_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/optim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// verdictCases are optimizer/scheduler blocks, each with at most one
// problem: path is the JSON path both readers must name ("" = accepted).
var verdictCases = []struct {
	name, doc, path string
}{
	// Optimizers deepgo implements.
	{"adam ok", `"optimizer":{"type":"Adam","params":{"lr":1e-3,"betas":[0.9,0.999],"eps":1e-8,"weight_decay":0.01}}`, ""},
	{"adam betas out of range", `"optimizer":{"type":"Adam","params":{"betas":[0.9,1.5]}}`, "optimizer.params.betas[1]"},
	{"adam betas one number", `"optimizer":{"type":"Adam","params":{"betas":[0.9]}}`, "optimizer.params.betas"},
	{"adam lr string", `"optimizer":{"type":"adam","params":{"lr":"0.001"}}`, "optimizer.params.lr"},
	{"adam negative eps", `"optimizer":{"type":"Adam","params":{"eps":-1e-8}}`, "optimizer.params.eps"},
	{"adam eps zero (torch allows it)", `"optimizer":{"type":"Adam","params":{"eps":0}}`, ""},
	{"adam unknown param", `"optimizer":{"type":"Adam","params":{"momentum":0.9}}`, "optimizer.params.momentum"},
	{"adam max_grad_norm", `"optimizer":{"type":"Adam","params":{"max_grad_norm":1.0}}`, "optimizer.params.max_grad_norm"},
	{"adamw ok", `"optimizer":{"type":"AdamW","params":{"lr":3e-4,"adam_w_mode":false,"torch_adam":true,"bias_correction":false}}`, ""},
	{"adamw amsgrad", `"optimizer":{"type":"ADAMW","params":{"amsgrad":true}}`, "optimizer.params.amsgrad"},
	{"adamw weight_decay bool", `"optimizer":{"type":"AdamW","params":{"weight_decay":true}}`, "optimizer.params.weight_decay"},
	{"lamb ok", `"optimizer":{"type":"Lamb","params":{"lr":1e-3,"max_coeff":5,"min_coeff":0.1}}`, ""},
	{"lamb min above max", `"optimizer":{"type":"lamb","params":{"max_coeff":1,"min_coeff":5}}`, "optimizer.params.min_coeff"},
	{"lion ok", `"optimizer":{"type":"Lion","params":{"lr":1e-4,"betas":[0.9,0.99],"weight_decay":0.1,"set_grad_none":true}}`, ""},
	{"lion eps", `"optimizer":{"type":"Lion","params":{"eps":1e-8}}`, "optimizer.params.eps"},
	{"sgd ok", `"optimizer":{"type":"SGD","params":{"lr":0.1,"momentum":0.9,"nesterov":true}}`, ""},
	{"sgd nesterov without momentum", `"optimizer":{"type":"SGD","params":{"nesterov":true}}`, "optimizer.params.nesterov"},
	{"sgd dampening", `"optimizer":{"type":"SGD","params":{"dampening":2}}`, "optimizer.params.dampening"},
	// Types deepgo does not implement, and names DeepSpeed refuses.
	{"onebitadam", `"optimizer":{"type":"OneBitAdam","params":{"lr":1e-3}}`, "optimizer.type"},
	{"zerooneadam", `"optimizer":{"type":"ZeroOneAdam"}`, "optimizer.type"},
	{"torch rmsprop", `"optimizer":{"type":"RMSprop"}`, "optimizer.type"},
	{"lower-case sgd", `"optimizer":{"type":"sgd"}`, "optimizer.type"},
	{"fusedadam class name", `"optimizer":{"type":"FusedAdam"}`, "optimizer.type"},
	// "auto": what config resolves, Initialize accepts; the rest both refuse.
	{"auto betas eps weight_decay", `"optimizer":{"type":"AdamW","params":{"lr":1e-3,"betas":"auto","eps":"auto","weight_decay":"auto"}}`, ""},
	{"auto lr", `"optimizer":{"type":"AdamW","params":{"lr":"auto"}}`, "optimizer.params.lr"},
	{"auto eps for lion", `"optimizer":{"type":"Lion","params":{"eps":"auto"}}`, "optimizer.params.eps"},
	// Schedulers, after a valid optimizer.
	{"warmuplr ok", `"scheduler":{"type":"WarmupLR","params":{"warmup_min_lr":0,"warmup_max_lr":1e-3,"warmup_num_steps":100,"warmup_type":"linear"}}`, ""},
	{"warmuplr fractional steps", `"scheduler":{"type":"WarmupLR","params":{"warmup_num_steps":2.5}}`, "scheduler.params.warmup_num_steps"},
	{"warmuplr unknown warmup_type", `"scheduler":{"type":"WarmupLR","params":{"warmup_type":"cosine"}}`, ""},
	{"warmuplr list for two groups", `"scheduler":{"type":"WarmupLR","params":{"warmup_min_lr":[0,0.1]}}`, "scheduler.params.warmup_min_lr"},
	{"warmuplr auto min and max", `"scheduler":{"type":"WarmupLR","params":{"warmup_min_lr":"auto","warmup_max_lr":"auto"}}`, ""},
	{"warmuplr auto steps", `"scheduler":{"type":"WarmupLR","params":{"warmup_num_steps":"auto"}}`, "scheduler.params.warmup_num_steps"},
	{"warmupdecaylr ok", `"scheduler":{"type":"WarmupDecayLR","params":{"total_num_steps":1000,"warmup_num_steps":10}}`, ""},
	{"warmupdecaylr no total", `"scheduler":{"type":"WarmupDecayLR","params":{"warmup_num_steps":10}}`, "scheduler.params.total_num_steps"},
	{"warmupdecaylr auto total", `"scheduler":{"type":"WarmupDecayLR","params":{"total_num_steps":"auto"}}`, "scheduler.params.total_num_steps"},
	{"warmupcosinelr ok", `"scheduler":{"type":"WarmupCosineLR","params":{"total_num_steps":100,"warmup_min_ratio":0.1}}`, ""},
	{"warmupcosinelr ratio above 1", `"scheduler":{"type":"WarmupCosineLR","params":{"total_num_steps":100,"cos_min_ratio":1.5}}`, ""},
	{"warmupcosinelr lr key", `"scheduler":{"type":"WarmupCosineLR","params":{"total_num_steps":100,"warmup_max_lr":0.1}}`, "scheduler.params.warmup_max_lr"},
	{"onecycle ok", `"scheduler":{"type":"OneCycle","params":{"cycle_min_lr":1e-4,"cycle_max_lr":1e-3,"cycle_first_step_size":100,"decay_step_size":10,"decay_lr_rate":0.1}}`, ""},
	{"onecycle no min", `"scheduler":{"type":"OneCycle","params":{"cycle_max_lr":1e-3}}`, "scheduler.params.cycle_min_lr"},
	{"onecycle zero step", `"scheduler":{"type":"OneCycle","params":{"cycle_min_lr":0.1,"cycle_max_lr":1,"cycle_first_step_size":0}}`, "scheduler.params.cycle_first_step_size"},
	{"onecycle momentum string", `"scheduler":{"type":"OneCycle","params":{"cycle_min_lr":0.1,"cycle_max_lr":1,"cycle_momentum":"yes"}}`, "scheduler.params.cycle_momentum"},
	{"lrrangetest ok", `"scheduler":{"type":"LRRangeTest","params":{"lr_range_test_min_lr":1e-5,"lr_range_test_step_size":50,"lr_range_test_staircase":true}}`, ""},
	{"lrrangetest zero step", `"scheduler":{"type":"LRRangeTest","params":{"lr_range_test_step_size":0}}`, "scheduler.params.lr_range_test_step_size"},
	{"lrrangetest staircase number", `"scheduler":{"type":"LRRangeTest","params":{"lr_range_test_staircase":1}}`, "scheduler.params.lr_range_test_staircase"},
	{"last_batch_iteration", `"scheduler":{"type":"WarmupLR","params":{"last_batch_iteration":-2}}`, "scheduler.params.last_batch_iteration"},
	{"torch steplr", `"scheduler":{"type":"StepLR","params":{"step_size":10}}`, "scheduler.type"},
	{"lower-case scheduler", `"scheduler":{"type":"warmuplr"}`, "scheduler.type"},
}

// TestConfigCheckAndInitializeAgree runs every case through what
// `deepgo config check --strict FILE` runs (config.Load with WithStrict) and
// through what deepgo.Initialize runs on the loaded config (optim.New, then
// optim.NewSchedule with the optimizer's lr), and asserts the same verdict
// at the same JSON path. Without --strict, an "auto" deepgo cannot resolve
// is listed as unresolved instead of failing: the path must be the same.
func TestConfigCheckAndInitializeAgree(t *testing.T) {
	be, err := backend.NewCPU(1)
	require.NoError(t, err)
	defer be.Close()
	dir := t.TempDir()
	for _, c := range verdictCases {
		t.Run(c.name, func(t *testing.T) {
			doc := c.doc
			if !strings.Contains(doc, `"optimizer"`) {
				doc = `"optimizer":{"type":"AdamW","params":{"lr":1e-3}},` + doc
			}
			file := filepath.Join(dir, "ds_config.json")
			require.NoError(t, os.WriteFile(file, []byte("{"+doc+"}"), 0o644))
			cfg, err := config.Load(file, config.WithStrict(true))
			checkPaths := fieldPaths(t, err)
			initPath := initializePath(t, cfg, be)
			want := []string{}
			if c.path != "" {
				want = []string{c.path}
			}
			require.True(t, slices.Equal(checkPaths, want) && initPath == c.path,
				"want %q from both\nconfig check: %v\nInitialize:   %q", c.path, err, initPath)
			cfg, err = config.Load(file)
			loose := append(fieldPaths(t, err), cfg.Unresolved...)
			assert.Equal(t, want, loose, "without --strict: errors and unresolved")
		})
	}
}

// fieldPaths returns the paths of config's errors.
func fieldPaths(t *testing.T, err error) []string {
	t.Helper()
	paths := []string{}
	if err == nil {
		return paths
	}
	var es config.Errors
	require.ErrorAs(t, err, &es, "config")
	for _, e := range es {
		paths = append(paths, e.Path)
	}
	return paths
}

// initializePath builds what deepgo.Initialize builds from cfg and returns
// the JSON path of its error ("" when it succeeds).
func initializePath(t *testing.T, cfg *config.Config, be backend.Backend) string {
	t.Helper()
	opt, err := optim.New(cfg.Optimizer.Type, cfg.Optimizer.Params, be)
	if err == nil {
		defer opt.Close()
		if cfg.Scheduler != nil {
			_, err = optim.NewSchedule(cfg.Scheduler.Type, cfg.Scheduler.Params, []float64{opt.Defaults().LR})
		}
	}
	if err == nil {
		return ""
	}
	var pe *optim.ParamError
	require.ErrorAs(t, err, &pe, "Initialize: names no JSON path")
	assert.True(t, errors.Is(err, optim.ErrUnsupportedOptimizer) || errors.Is(err, optim.ErrInvalidOptimizerParam) ||
		errors.Is(err, optim.ErrUnknownSchedule) || errors.Is(err, optim.ErrInvalidScheduleParam),
		"Initialize: %v matches none of optim's sentinels", err)
	return pe.Key
}
