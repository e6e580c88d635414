package deepgo_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/offload"
	"github.com/deepgo-ml/deepgo/zero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// paramSwapLog records, before a run's last step, rank 0's Memory() and
// parameter swapper counters, and whether the swap file existed.
type paramSwapLog struct {
	mu    sync.Mutex
	mem   zero.Memory
	stats offload.ParamSwapStats
	file  bool
}

func (l *paramSwapLog) hook(dir string) func(int, *testmodel.MLP, *deepgo.Engine, int) {
	return func(rank int, _ *testmodel.MLP, e *deepgo.Engine, step int) {
		if rank != 0 || step != 19 {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.mem = e.Memory()
		if s, ok := e.ZeRO().ParamStore().(*offload.ParamSwapper); ok {
			l.stats = s.Stats()
		}
		_, err := os.Stat(offload.ParamSwapDir(dir, rank))
		l.file = err == nil
	}
}

// ZeRO-3 with the parameter partitions in swap files (offload_param.device
// "nvme"), alone and with the optimizer state swapped too, trains
// bit-identically to no offload over 20 steps (worlds 1 and 2, fp32 and
// bf16, max_in_cpu keeping none or the first partition in host memory):
// the same losses (the forward ran on partitions read back from the files)
// and the same master weights. Reads happen every step and some were
// started ahead by the prefetch; the swap folders are gone after Close.
func TestOffloadParamNVMeIsExact(t *testing.T) {
	z3 := `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	for _, world := range []int{1, 2} {
		for _, prec := range []string{"", "bf16"} {
			for _, opt := range []string{"", "nvme"} {
				for _, maxInCPU := range []int{0, 144} {
					base := run{stage: 3, world: world, gas: 2, steps: 20, precision: prec, zeroExtra: z3}
					name := fmt.Sprintf("%s/optimizer=%s/max_in_cpu=%d", base, opt, maxInCPU)
					t.Run(name, func(t *testing.T) {
						dir := t.TempDir()
						off := base
						off.zeroExtra += fmt.Sprintf(`, "offload_param": {"device": "nvme", "nvme_path": %q, "buffer_count": 2, "buffer_size": 1024, "max_in_cpu": %d}`, dir, maxInCPU)
						if opt != "" {
							off.zeroExtra += `, "offload_optimizer": {"device": "nvme", "nvme_path": "` + dir + `", "pipeline_read": true}`
						}
						log := &paramSwapLog{}
						off.hook = log.hook(dir)
						want, err := train(t, base)
						require.NoError(t, err)
						got, err := train(t, off)
						require.NoError(t, err)
						bitEqualRuns(t, want, got)
						require.NoError(t, bitEqual(want.params, got.params))

						st, m := log.stats, log.mem
						t.Logf("swapper %+v; params %d B, on disk %d B, store host %d B", st, m.ParamBytes(), m.ParamsOnDisk, m.ParamStoreHost)
						assert.True(t, log.file, "no parameter swap folder during training")
						assert.Positive(t, st.Swapped, "partitions in the file")
						assert.Equal(t, maxInCPU > 0, st.InCPU > 0, "partitions kept by max_in_cpu")
						assert.GreaterOrEqual(t, st.Reads, int64(19*2*st.Swapped), "a read per swapped partition per micro-step at least")
						assert.Positive(t, st.Prefetched, "reads started ahead of their gather")
						assert.GreaterOrEqual(t, st.Writes, int64(19*st.Swapped), "a write per swapped partition per step")
						assert.Positive(t, m.ParamsOnDisk)
						assert.Less(t, m.ParamsOnDisk, m.ParamBytes()+1)
						assert.NotContains(t, strings.Join(got.engines[0].Notes(), "\n"), "not supported")
						left, err := os.ReadDir(dir)
						require.NoError(t, err)
						assert.Empty(t, left, "swap folders left after Close")
					})
				}
			}
		}
	}
}

// A model whose parameter partitions do not fit a host-memory limit set
// for the test trains with offload_param.device "nvme": the host memory
// the parameter store holds (the partitions max_in_cpu keeps and
// buffer_count buffers, never more than buffer_size elements each) stays
// within max_in_cpu + buffer_count×buffer_size elements and under the
// limit, the rest of the partitions are on disk, and training is
// bit-identical to keeping them in memory.
func TestOffloadParamNVMeBoundsHostMemory(t *testing.T) {
	const (
		limit       = 180000 // bytes of parameter partitions the host may hold
		maxInCPU    = 8320   // the first layer's 64×128+128 elements
		bufferCount = 2
		bufferSize  = 17408 // a 128×128+128 layer fits; 17 Ki fp32 elements are whole 4 KiB aio blocks
	)
	layers := []int{64, 128, 128, 128, 128, 16}
	for _, world := range []int{1, 2} {
		t.Run(fmt.Sprintf("world%d", world), func(t *testing.T) {
			dir := t.TempDir()
			base := run{stage: 3, world: world, gas: 1, steps: 20, sizes: layers}
			off := base
			off.zeroExtra = fmt.Sprintf(`, "stage3_param_persistence_threshold": 20, "offload_param": {"device": "nvme", "nvme_path": %q, "buffer_count": %d, "buffer_size": %d, "max_in_cpu": %d}`,
				dir, bufferCount, bufferSize, maxInCPU)
			mem := &memLog{}
			log := &paramSwapLog{}
			base.hook = mem.last("ref")
			off.hook = log.hook(dir)
			want, err := train(t, base)
			require.NoError(t, err)
			got, err := train(t, off)
			require.NoError(t, err)
			bitEqualRuns(t, want, got)

			r, o := mem.m["ref"], log.mem
			bound := int64(maxInCPU+bufferCount*bufferSize) * 4
			t.Logf("partitions %d B; store host %d B (peak %d, bound %d, limit %d); on disk %d B; swapper %+v",
				r.ParamBytes(), o.ParamStoreHost, o.ParamStoreHostPeak, bound, limit, o.ParamsOnDisk, log.stats)
			if world == 1 {
				require.Greater(t, r.ParamBytes(), int64(limit), "the test's partitions must not fit the limit")
			}
			assert.Equal(t, r.ParamBytes(), o.ParamBytes(), "Params: the same partitions, wherever they live")
			assert.LessOrEqual(t, o.ParamStoreHostPeak, bound, "store host memory within max_in_cpu + buffer_count×buffer_size")
			assert.LessOrEqual(t, o.ParamStoreHostPeak, int64(limit), "store host memory under the limit")
			assert.Equal(t, o.ParamStoreHost, o.ParamStoreHostPeak)
			assert.GreaterOrEqual(t, o.ParamsOnDisk, r.ParamBytes()-maxInCPU*4, "all but max_in_cpu elements on disk")
			assert.Equal(t, r.HostBytes-r.ParamBytes()+o.Master-r.Master+o.ParamStoreHost, o.HostBytes,
				"HostBytes: the partitions replaced by the store's memory (and the fp32 master the step now keeps apart)")
		})
	}
}

// offload_param.device "cpu" on the simulated device keeps the partitions
// in host memory and copies each to the device before its gather, and
// "nvme" reads it from a file first; both, alone and with the optimizer
// offloaded the same way, train bit-identically to the CPU backend over 20
// steps (worlds 1 and 2, fp32 and bf16). The partitions leave the device:
// with the optimizer offloaded too the device holds less than without by
// the partitions, the master weights and the state.
func TestOffloadParamOnSimIsExact(t *testing.T) {
	z3 := `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	for _, world := range []int{1, 2} {
		for _, prec := range []string{"", "bf16"} {
			base := run{stage: 3, world: world, gas: 2, steps: 20, precision: prec, zeroExtra: z3}
			t.Run(base.String(), func(t *testing.T) {
				want, err := train(t, base)
				require.NoError(t, err)
				mem := &memLog{}
				dev := base
				dev.dev, dev.hook = "sim", mem.last("dev")
				_, err = train(t, dev)
				require.NoError(t, err)
				d := mem.m["dev"]
				for _, to := range []string{"cpu", "nvme"} {
					for _, opt := range []bool{false, true} {
						key := fmt.Sprintf("param=%s/optimizer=%v", to, opt)
						dir := t.TempDir()
						off := base
						off.dev, off.hook = "sim+delay", mem.last(key)
						off.zeroExtra += fmt.Sprintf(`, "offload_param": {"device": %q, "nvme_path": %q, "buffer_count": 2, "buffer_size": 1024, "max_in_cpu": 0}`, to, dir)
						if opt {
							off.zeroExtra += fmt.Sprintf(`, "offload_optimizer": {"device": %q, "nvme_path": %q}`, to, dir)
						}
						got, err := train(t, off)
						require.NoError(t, err, key)
						bitEqualRuns(t, want, got)
						require.NoError(t, bitEqual(want.params, got.params), key)
						o := mem.m[key]
						t.Logf("%s: device %d -> %d B, host %d B (store %d B, on disk %d B)", key, d.DeviceBytes, o.DeviceBytes, o.HostBytes, o.ParamStoreHost, o.ParamsOnDisk)
						assert.Positive(t, o.ParamStoreHost, key)
						if opt {
							assert.LessOrEqual(t, o.DeviceBytes, d.DeviceBytes-d.ParamBytes()-d.Master-d.OptimizerState, "%s: DeviceBytes", key)
						}
						notes := strings.Join(got.engines[0].Notes(), "\n")
						assert.Contains(t, notes, "offload_param.device="+to+": this rank's parameter partitions live in ", key)
					}
				}
			})
		}
	}
}

// A checkpoint does not depend on offload_param: saved with the partitions
// in swap files (fp32 and bf16) and loaded into engines without offload,
// and the other way round, training resumes bit-identically to an
// uninterrupted run (Load writes the restored partitions back to the
// store).
func TestOffloadParamCheckpointResume(t *testing.T) {
	for _, prec := range []string{"", "bf16"} {
		plain := run{stage: 3, world: 2, gas: 2, precision: prec, steps: ckptSteps}
		ref, err := train(t, plain)
		require.NoError(t, err)
		swapped := plain
		swapped.zeroExtra = `, "stage3_param_persistence_threshold": 20, "offload_param": {"device": "nvme", "nvme_path": "` + t.TempDir() + `", "buffer_count": 1, "buffer_size": 1024, "max_in_cpu": 0}`
		for _, c := range []struct {
			name          string
			saver, loader run
		}{{"nvme->none", swapped, plain}, {"none->nvme", plain, swapped}, {"nvme->nvme", swapped, swapped}} {
			t.Run(plain.String()+"/"+c.name, func(t *testing.T) {
				dir := t.TempDir()
				_, _, err := segment{r: c.saver, save: dir, from: 0, to: ckptAt}.train(t)
				require.NoError(t, err)
				got, _, err := segment{r: c.loader, load: dir, from: ckptAt, to: ckptSteps}.train(t)
				require.NoError(t, err)
				require.NoError(t, bitEqual(ref.params, got))
			})
		}
	}
}

// pin_memory on a device backend: CPU offload's gradient chunk and half
// weights (offload_optimizer) and the parameter partitions (offload_param)
// come from the device backend's HostEmpty, and Memory().Pinned counts
// them; with pin_memory false none do. Either way training is
// bit-identical to the CPU backend without offload (stage 3 with both
// offloads, stage 2 with the optimizer's, fp32 and bf16, under the
// simulated device's delays), and Notes say which.
func TestPinMemoryOnSim(t *testing.T) {
	const steps = 4
	z3 := `, "stage3_param_persistence_threshold": 20, "stage3_prefetch_bucket_size": 300`
	for _, stage := range []int{2, 3} {
		for _, prec := range []string{"", "bf16"} {
			base := run{stage: stage, world: 2, gas: 2, steps: steps, precision: prec, zeroExtra: z3}
			want, err := train(t, base)
			require.NoError(t, err)
			for _, pin := range []bool{true, false} {
				t.Run(fmt.Sprintf("%v/pin=%v", base, pin), func(t *testing.T) {
					var mu sync.Mutex
					var mem zero.Memory
					off := base
					off.dev = "sim+delay"
					off.hook = func(rank int, _ *testmodel.MLP, e *deepgo.Engine, step int) {
						if rank == 0 && step == steps-1 {
							mu.Lock()
							mem = e.Memory()
							mu.Unlock()
						}
					}
					off.zeroExtra += fmt.Sprintf(`, "offload_optimizer": {"device": "cpu", "pin_memory": %v}`, pin)
					if stage == 3 {
						off.zeroExtra += fmt.Sprintf(`, "offload_param": {"device": "cpu", "pin_memory": %v}`, pin)
					}
					got, err := train(t, off)
					require.NoError(t, err)
					bitEqualRuns(t, want, got)
					require.NoError(t, bitEqual(want.params, got.params))
					notes := strings.Join(got.engines[0].Notes(), "\n")
					if !pin {
						assert.Zero(t, mem.Pinned)
						assert.Contains(t, notes, "pin_memory false: the host buffers are the C allocator's")
						return
					}
					// the gradient chunk (fp32 accumulation), the half
					// weights under bf16, and stage 3's partitions
					assert.Positive(t, mem.Pinned)
					assert.LessOrEqual(t, mem.Pinned, mem.HostBytes)
					if stage == 3 {
						assert.Greater(t, mem.Pinned, mem.ParamStoreHost, "partitions and offload buffers")
					}
					assert.Contains(t, notes, "offload_optimizer.device=cpu: ")
					assert.Contains(t, notes, "pin_memory: the host buffers the copies use come from the sim:0 backend's HostEmpty")
					assert.NotContains(t, notes, "pin_memory false")
				})
			}
		}
	}
}

// An nvme_path the parameter swapper cannot use (one that cannot be
// created, a regular file) fails Initialize with an error naming
// zero_optimization.offload_param and the path, as the same path under
// offload_optimizer does, on every rank and with the optimizer offloaded
// too: no panic in the cleanup of the half-built ZeRO optimizer.
func TestOffloadParamBadNVMePath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		name, path, want string
	}{
		{"uncreatable", filepath.Join(file, "below-a-file"), "not a directory"},
		{"regular file", file, "not a directory"},
	} {
		for _, opt := range []string{"", `, "offload_optimizer": {"device": "cpu"}`} {
			t.Run(fmt.Sprintf("%s/optimizer offload=%v", tc.name, opt != ""), func(t *testing.T) {
				r := run{stage: 3, world: 2, gas: 1, steps: 1, zeroExtra: fmt.Sprintf(
					`, "offload_param": {"device": "nvme", "nvme_path": %q, "buffer_count": 2, "buffer_size": 1024, "max_in_cpu": 0}%s`, tc.path, opt)}
				var err error
				require.NotPanics(t, func() { _, err = train(t, r) })
				require.Error(t, err)
				t.Logf("%v", err)
				assert.Contains(t, err.Error(), "zero_optimization.offload_param: ")
				assert.Contains(t, err.Error(), fmt.Sprintf("nvme_path %q", tc.path))
				assert.Contains(t, err.Error(), tc.want)
			})
		}
	}
}
