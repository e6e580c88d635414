package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goField is the Go field name of the config key at path, "" if none.
func goField(path string) string {
	t := reflect.TypeOf(config.Config{})
	name := ""
	for _, part := range strings.Split(path, ".") {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return ""
		}
		found := false
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); strings.Split(f.Tag.Get("json"), ",")[0] == part {
				t, name, found = f.Type, f.Name, true
				break
			}
		}
		if !found {
			return ""
		}
	}
	return name
}

// TestNoEffectKeysUnread: every listed key is a config field that no
// non-test Go file outside package config selects (the monitor reads
// wandb.enabled and comet.enabled only to say they are not supported;
// package doctor reads keys to advise on them, which gives them no effect
// on training).
func TestNoEffectKeysUnread(t *testing.T) {
	var src bytes.Buffer
	require.NoError(t, filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "config" || d.Name() == "doctor" || strings.HasPrefix(d.Name(), ".")) && p != "../.." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") && p != "config_noeffect.go" {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			src.Write(b)
		}
		return nil
	}))
	// field names other sections use too (checkpoint.writer.type's Type,
	// checkpoint.writer.data_parallel's DataParallel)
	generic := map[string]bool{"Writer": true, "Pipeline": true, "Wandb": true, "Comet": true, "Type": true, "DataParallel": true}
	for key := range noEffect {
		f := goField(key)
		if !assert.NotEmpty(t, f, "%s is not a config key", key) || generic[f] {
			continue
		}
		re := regexp.MustCompile(`\.` + f + `\b`)
		assert.False(t, re.Match(src.Bytes()), "%s (field %s) is read outside package config: drop it from noEffect", key, f)
	}
}

// deepgo config check on the shared DeepSpeed configs lists what loads but
// does nothing: keys from the list and the sections kept verbatim, only
// those the document set.
func TestConfigCheckNoEffect(t *testing.T) {
	dir := shareddata.Dir(t, shareddata.ConfigsEnv, "configs")
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	require.NotEmpty(t, files)
	total := 0
	for _, f := range files {
		cfg, err := config.Load(f)
		if err != nil {
			continue
		}
		for _, line := range noEffectKeys(cfg) {
			key := line[:strings.Index(line, ":")]
			total++
			if _, other := cfg.Other[key]; other {
				continue
			}
			assert.True(t, cfg.IsSet(key), "%s: %s listed but not set", filepath.Base(f), key)
		}
	}
	assert.Positive(t, total, "the shared configs set some keys without effect")

	var out, errb bytes.Buffer
	p := filepath.Join(t.TempDir(), "c.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"train_batch_size": 8, "memory_breakdown": true, "wall_clock_breakdown": true,
		"zero_optimization": {"stage": 2, "round_robin_gradients": true, "reduce_bucket_size": 1000}, "eigenvalue": {"enabled": true}, "hybrid_engine": {"enabled": false}}`), 0o644))
	require.Zero(t, run([]string{"config", "check", p}, &out, &errb), errb.String())
	assert.Contains(t, errb.String(), "3 key(s) load but have no effect in deepgo:")
	assert.Contains(t, errb.String(), "no effect: zero_optimization.round_robin_gradients:")
	// a section DeepSpeed removed says so (0.19.8 refuses it), one it keeps does not
	assert.Contains(t, errb.String(), "no effect: eigenvalue: removed from DeepSpeed (0.19.8 refuses a config holding it)")
	assert.Contains(t, errb.String(), "no effect: hybrid_engine: recognised DeepSpeed section")
	assert.NotContains(t, errb.String(), "no effect: wall_clock_breakdown")
	assert.NotContains(t, errb.String(), "no effect: memory_breakdown") // printed by the engine
	assert.NotContains(t, errb.String(), "no effect: zero_optimization.reduce_bucket_size")
}

// TestNoEffectSeqParallelDType: the reason given for
// seq_parallel_communication_data_type is the true one (Ulysses trains with
// sequence_parallel_size above 1, its all-to-alls exchange fp32), not that
// sequence parallelism is unsupported.
func TestNoEffectSeqParallelDType(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
	}{
		{"bf16 with sp 2", `{"train_micro_batch_size_per_gpu": 1, "sequence_parallel_size": 2, "seq_parallel_communication_data_type": "bf16"}`},
		{"fp16 with sp 1", `{"train_micro_batch_size_per_gpu": 1, "seq_parallel_communication_data_type": "fp16"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.json")
			require.NoError(t, os.WriteFile(p, []byte(tc.doc), 0o644))
			var out, errb bytes.Buffer
			require.Zero(t, run([]string{"config", "check", p}, &out, &errb), errb.String())
			assert.Contains(t, errb.String(), "no effect: seq_parallel_communication_data_type: the Ulysses all-to-alls always exchange fp32")
			assert.NotContains(t, errb.String(), "not supported")
		})
	}
}

// With pipeline stages every monitoring key takes effect (the pipeline
// engine feeds them as the data-parallel one does): none is listed as
// having no effect.
func TestNoEffectPipelineMonitors(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
		"pipeline_model_parallel_size": 2, "csv_monitor": {"enabled": true}, "tensorboard": {"enabled": true},
		"wall_clock_breakdown": true, "comms_logger": {"enabled": true}, "flops_profiler": {"enabled": true}}`))
	require.NoError(t, err)
	got := strings.Join(noEffectKeys(cfg), "\n")
	for _, k := range []string{"csv_monitor", "tensorboard", "wall_clock_breakdown", "comms_logger", "flops_profiler"} {
		assert.NotContains(t, got, k+":")
	}
}

// checkpoint.writer.decoupled has effect (deepgo train saves in the
// background), so it is not listed; the other writer keys set are, each by
// itself. deepgo train's note says what decoupled does, or that it does
// nothing without save_dir.
func TestNoEffectCheckpointWriter(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"train_batch_size": 8, "checkpoint": {"writer": {"decoupled": true, "io_buffer_size": 1024}}}`), 0o644))
	var out, errb bytes.Buffer
	require.Zero(t, run([]string{"config", "check", p}, &out, &errb), errb.String())
	assert.Contains(t, errb.String(), "1 key(s) load but have no effect in deepgo:")
	assert.Contains(t, errb.String(), "no effect: checkpoint.writer.io_buffer_size: ")
	assert.NotContains(t, errb.String(), "decoupled")

	cfg, err := config.Parse([]byte(`{"train_batch_size": 8, "checkpoint": {"writer": {"decoupled": true}}}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"checkpoint.writer.decoupled: no effect: checkpoint.save_dir is not set, so the run saves no checkpoint"}, decoupledNotes(cfg))
	cfg.Checkpoint.SaveDir = t.TempDir()
	require.Len(t, decoupledNotes(cfg), 1)
	assert.Contains(t, decoupledNotes(cfg)[0], "checkpoints are written in the background")
	cfg.Checkpoint.Writer.Decoupled = false
	assert.Empty(t, decoupledNotes(cfg))
}
