package deepgo_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
)

// ZeRO-Offload configs (offload_optimizer / offload_param on "cpu", the
// commonest DeepSpeed setups) train on the CPU backend exactly as without
// offload: the state already lives in host memory. The engine says so in
// Notes. NVMe is refused naming the key.
func TestOffloadCPUIsExactOnCPUBackend(t *testing.T) {
	for _, stage := range []int{2, 3} {
		base := run{stage: stage, world: 2, gas: 1, steps: 5}
		off := base
		off.zeroExtra = `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300` +
			`, "offload_optimizer": {"device": "cpu", "pin_memory": true}`
		if stage == 3 {
			off.zeroExtra += `, "offload_param": {"device": "cpu"}`
		}
		ref, err := train(t, base)
		if err != nil {
			t.Fatal(err)
		}
		got, err := train(t, off)
		if err != nil {
			t.Fatalf("stage %d with CPU offload: %v", stage, err)
		}
		for name, want := range ref.params {
			for i := range want {
				if math.Float32bits(got.params[name][i]) != math.Float32bits(want[i]) {
					t.Fatalf("stage %d: %s[%d] = %g with offload, %g without", stage, name, i, got.params[name][i], want[i])
				}
			}
		}
		notes := got.engines[0].Notes()
		if len(notes) == 0 || !strings.Contains(notes[0], "offload_optimizer.device=cpu") {
			t.Errorf("stage %d: Notes() = %q, want the offload note", stage, notes)
		}
	}
}

func TestOffloadNVMeNotSupported(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
		"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = deepgo.Initialize(context.Background(), cfg, testmodel.NewMLP(1, 4, 3))
	if err == nil || !strings.Contains(err.Error(), "offload_optimizer.device=nvme") || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("Initialize with NVMe offload: %v, want a not-supported error naming the key", err)
	}
}
