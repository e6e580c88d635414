package config

import (
	"errors"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
)

// TestSeed175B loads the user's own 175B example: offload_param to NVMe
// without nvme_path, and ZeRO-3 with 4 pipeline stages, are both reported.
func TestSeed175B(t *testing.T) {
	cfg, err := Load(shareddata.ConfigFile(t, "5.1-175b.json"), WithWorld(64))
	var es Errors
	if !errors.As(err, &es) || cfg == nil {
		t.Fatalf("want Errors, got %v", err)
	}
	if findErr(es, "zero_optimization.offload_param.nvme_path") == nil || findErr(es, "zero_optimization.stage") == nil {
		t.Errorf("missing expected errors: %v", err)
	}
	if cfg.PipelineSchedule.Type != "Interleaved" || cfg.TensorModelParallelSize != 8 || cfg.PipelineModelParallelSize != 4 {
		t.Errorf("user keys: %+v", cfg.PipelineSchedule)
	}
	if b, err := cfg.Resolve(64, 0, 0, 0); err != nil || b.DataParallel != 2 || b.MicroBatch != 64 {
		t.Errorf("Resolve: %+v %v", b, err)
	}
}
