package deepgo_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		require.NoError(t, err)
		got, err := train(t, off)
		require.NoError(t, err, "stage %d with CPU offload", stage)
		for name, want := range ref.params {
			for i := range want {
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got.params[name][i]), "stage %d: %s[%d] = %g with offload, %g without", stage, name, i, got.params[name][i], want[i])
			}
		}
		notes := got.engines[0].Notes()
		if assert.NotEmpty(t, notes, "stage %d: Notes(), want the offload note", stage) {
			assert.Contains(t, notes[0], "offload_optimizer.device=cpu", "stage %d: Notes() = %q", stage, notes)
		}
	}
}

func TestOffloadNVMeNotSupported(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1,
		"optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
		"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}}`))
	require.NoError(t, err)
	m := testmodel.NewMLP(1, 4, 3)
	defer m.FreeUndonated()
	_, err = deepgo.Initialize(context.Background(), cfg, m)
	require.ErrorContains(t, err, "offload_optimizer.device=nvme", "Initialize with NVMe offload")
	require.ErrorContains(t, err, "not supported", "Initialize with NVMe offload")

}

// The sequence_parallel section is reported, not silently ignored: at
// sequence_parallel_size 1 nothing is sharded, and the window is the
// model's to apply.
func TestSequenceParallelNotes(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
		"sequence_parallel": {"enabled": true, "attention_window_size": 1024}}`))
	require.NoError(t, err)
	tr, err := deepgo.Initialize(context.Background(), cfg, testmodel.NewMLP(1, 4, 3))
	require.NoError(t, err)
	defer tr.Close()
	notes := strings.Join(tr.Notes(), "\n")
	assert.Contains(t, notes, "sequence_parallel.enabled: sequence_parallel_size is 1")
	assert.Contains(t, notes, "sequence_parallel.attention_window_size=1024")
}
