package config

import (
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSeed175B loads the user's own 175B example: offload_param to NVMe
// without nvme_path, and ZeRO-3 with 4 pipeline stages, are both reported.
func TestSeed175B(t *testing.T) {
	cfg, err := Load(shareddata.ConfigFile(t, "5.1-175b.json"), WithWorld(64))
	var es Errors
	require.ErrorAs(t, err, &es)
	require.NotNil(t, cfg, "Load returned no config with its errors")
	assert.NotNil(t, findErr(es, "zero_optimization.offload_param.nvme_path"), "missing expected errors: %v", err)
	assert.NotNil(t, findErr(es, "zero_optimization.stage"), "missing expected errors: %v", err)
	assert.Equal(t, "Interleaved", cfg.PipelineSchedule.Type, "user keys")
	assert.Equal(t, 8, cfg.TensorModelParallelSize, "user keys")
	assert.Equal(t, 4, cfg.PipelineModelParallelSize, "user keys")
	b, err := cfg.Resolve(64, 0, 0, 0)
	if assert.NoError(t, err, "Resolve") {
		assert.Equal(t, 2, b.DataParallel, "Resolve: %+v", b)
		assert.Equal(t, 64, b.MicroBatch, "Resolve: %+v", b)
	}
}
