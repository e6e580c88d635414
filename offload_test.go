package deepgo_test

import (
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/offload"
	"github.com/deepgo-ml/deepgo/tensor"
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

// NVMe offload of the optimizer state (offload_optimizer.device "nvme")
// trains bit-identically to no offload, stages 2 and 3, worlds 1 and 2,
// over 20 steps, and leaves no swap folder behind once closed.
func TestOffloadNVMeOptimizerIsExact(t *testing.T) {
	for _, stage := range []int{2, 3} {
		for _, world := range []int{1, 2} {
			dir := t.TempDir()
			base := run{stage: stage, world: world, gas: 1, steps: 20}
			off := base
			off.zeroExtra = `, "offload_optimizer": {"device": "nvme", "nvme_path": "` + dir + `", "buffer_count": 2, "pipeline_read": true, "pipeline_write": true}`
			var swapped atomic.Int64 // swap-file bytes seen on disk during training
			off.hook = func(rank int, _ *testmodel.MLP, _ *deepgo.Engine, step int) {
				if step == 0 {
					return
				}
				files, _ := os.ReadDir(offload.SwapDir(dir, rank))
				for _, f := range files {
					if fi, err := f.Info(); err == nil {
						swapped.Add(fi.Size())
					}
				}
			}
			ref, err := train(t, base)
			require.NoError(t, err)
			got, err := train(t, off)
			require.NoError(t, err, "stage %d world %d with NVMe offload", stage, world)
			require.Equal(t, ref.losses, got.losses, "stage %d world %d: losses", stage, world)
			for name, want := range ref.params {
				for i := range want {
					require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got.params[name][i]), "stage %d world %d: %s[%d]", stage, world, name, i)
				}
			}
			assert.Positive(t, swapped.Load(), "stage %d world %d: no swap file under nvme_path during training", stage, world)
			left, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, left, "stage %d world %d: swap folders left after Close", stage, world)
		}
	}
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

// At ZeRO stage 0 the config loader warns that offload_optimizer is
// ignored, and the engine ignores it: on a device no host step, no host
// memory and no offload note; with device nvme no swap folder.
func TestOffloadOptimizerIgnoredAtStage0(t *testing.T) {
	for _, dev := range []string{"cpu", "nvme"} {
		dir := t.TempDir()
		cfg, err := config.Parse([]byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.1}},
			"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "` + dev + `", "nvme_path": "` + dir + `"}}}`))
		require.NoError(t, err)
		m := testmodel.NewMLP(1, 4, 3)
		e, err := initEngine(context.Background(), cfg, m, deepgo.WithDevice(tensor.Sim(0)))
		require.NoError(t, err, dev)
		mem := e.Memory()
		assert.Zero(t, mem.HostBytes, "%s: host bytes at stage 0", dev)
		assert.Zero(t, mem.Master, "%s: no host fp32 master at stage 0", dev)
		for _, n := range e.Notes() {
			assert.NotContains(t, n, "offload_optimizer.device="+dev+":", "%s: a note says it offloads", dev)
		}
		assert.True(t, slices.ContainsFunc(e.Notes(), func(n string) bool { return strings.Contains(n, "ignored at stage 0") }),
			"%s: the loader's warning among the notes: %q", dev, e.Notes())
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, entries, "%s: nothing swapped under nvme_path", dev)
		require.NoError(t, e.Close())
	}
}
