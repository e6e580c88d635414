package config

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestValidate: a *Config Parse returned with Errors keeps failing with
// them; a clean one passes, "auto" and warnings included, until a field is
// set out of range in Go, which fails with the path, value and what is
// allowed, as Parse would have said.
func TestValidate(t *testing.T) {
	bad, err := Parse([]byte(`{"zero_optimization": {"stage": 4}, "gradient_accumulation_steps": 0}`))
	require.Error(t, err)
	require.NotNil(t, bad)
	assert.Equal(t, 0, bad.ZeroOptimization.Stage, "the bad stage was replaced by the default")
	assert.Equal(t, err, bad.Validate(), "Validate returns Parse's errors")

	cfg, err := Parse([]byte(`{
		"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
		"optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
		"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"},
		"fp16": {"enabled": "auto"}, "unknown_top_level_key": 1}`))
	require.NoError(t, err)
	require.NotEmpty(t, cfg.Warnings)
	require.NoError(t, cfg.Validate(), "auto values and warnings are not errors")

	cases := []struct {
		name string
		set  func(c *Config)
		want string
	}{
		{"stage", func(c *Config) { c.ZeroOptimization.Stage = 7 }, "zero_optimization.stage: got 7; allowed: an integer >= 0 and <= 3"},
		{"clipping", func(c *Config) { c.GradientClipping = -3 }, "gradient_clipping: got -3"},
		{"bucket", func(c *Config) { c.ZeroOptimization.ReduceBucketSize = -5 }, "zero_optimization.reduce_bucket_size: got -5"},
		{"both precisions", func(c *Config) { c.FP16.Enabled, c.BF16.Enabled = true, true }, "bf16.enabled"},
		{"accumulation", func(c *Config) { zero := 0; c.GradientAccumulationSteps = &zero }, "gradient_accumulation_steps: got 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(`{"zero_optimization": {"stage": 1}}`))
			require.NoError(t, err)
			require.NoError(t, cfg.Validate())
			c.set(cfg)
			err = cfg.Validate()
			var es Errors
			require.ErrorAs(t, err, &es)
			assert.ErrorContains(t, err, c.want)
		})
	}
}

// TestValidateKeepsOptions: Validate checks with the options Parse read
// the document with: a field changed in Go that only the world size makes
// wrong is caught when the config was parsed WithWorld; a NaN set in Go is
// an error saying so.
func TestValidateKeepsOptions(t *testing.T) {
	cfg, err := Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1}`), WithWorld(4))
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	tb := 12 // micro 2 × accumulation 1 × data-parallel 4 is 8, not 12
	cfg.TrainBatchSize = &tb
	assert.ErrorContains(t, cfg.Validate(), "train_batch_size")

	cfg, err = Parse([]byte(`{"zero_optimization": {"stage": 1}}`))
	require.NoError(t, err)
	cfg.GradientClipping = math.NaN()
	assert.ErrorContains(t, cfg.Validate(), "no JSON form (NaN or an infinity?)")
}
