package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tiny is a model small enough for a smoke run of a second.
var tiny = []string{"-layers", "1", "-heads", "2", "-width", "64", "-vocab", "256", "-seq", "32", "-batch", "2", "-steps", "2", "-peak-n", "128"}

type report struct {
	Device     string  `json:"device"`
	PeakMethod string  `json:"peak_method"`
	PeakGFLOPs float64 `json:"peak_gflops"`
	Runs       []run   `json:"runs"`
}

func runJSON(t *testing.T, args ...string) report {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, execute(append(append([]string(nil), tiny...), args...), &out))
	var r report
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	return r
}

// TestSimSmoke: -device sim runs the GPT on the simulated device (memory Go
// cannot read, so every parameter, gradient and activation went through
// the device path), reports its peak and both checkpointing settings, and
// computes the very loss the CPU run does (sim runs the CPU kernels).
func TestSimSmoke(t *testing.T) {
	s := runJSON(t, "-device", "sim", "-threads", "1")
	c := runJSON(t, "-device", "cpu")
	assert.Equal(t, "sim:0", s.Device)
	assert.Contains(t, s.PeakMethod, "128^3 sgemm on device tensors")
	assert.Greater(t, s.PeakGFLOPs, 0.0)
	require.Len(t, s.Runs, 2)
	require.Len(t, c.Runs, 4)
	for i, r := range s.Runs {
		assert.Equal(t, "sim:0", r.Device)
		assert.Equal(t, i == 1, r.Checkpointing)
		assert.Greater(t, r.TokensPerSec, 0.0)
		assert.Greater(t, r.MFU, 0.0)
		assert.Positive(t, r.ActivationBytes)
		assert.Equal(t, c.Runs[0].Loss, r.Loss, "sim and cpu losses")
	}
}

// TestPeakIsBestSample: on the CPU each thread count's sgemm is timed
// before and after its runs, and the MFUs divide by the best of those
// timings (one slow timing must not lift MFU).
func TestPeakIsBestSample(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, execute(append([]string(nil), tiny...), &out))
	var r struct {
		FLOPsPerToken float64              `json:"flops_per_token"`
		Peaks         map[string]float64   `json:"peak_sgemm_gflops"`
		Samples       map[string][]float64 `json:"peak_sgemm_samples_gflops"`
		Runs          []run                `json:"runs"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	require.Len(t, r.Runs, 4)
	for _, th := range []string{"1", "2"} {
		require.Len(t, r.Samples[th], 2, "threads %s", th)
		assert.Equal(t, slices.Max(r.Samples[th]), r.Peaks[th], "threads %s", th)
	}
	for _, x := range r.Runs {
		peak := r.Peaks[strconv.Itoa(x.Threads)]
		assert.InDelta(t, r.FLOPsPerToken*x.TokensPerSec/1e9/peak, x.MFU, 1e-9, "threads %d", x.Threads)
	}
}

func TestArgErrors(t *testing.T) {
	for _, c := range []struct{ args []string }{
		{[]string{"-device", "tpu"}},
		{[]string{"-device", "sim:1"}},
		{[]string{"-steps", "0"}},
		{[]string{"-heads", "5"}},
	} {
		err := execute(append(append([]string(nil), tiny...), c.args...), &bytes.Buffer{})
		require.Error(t, err, "%v", c.args)
		assert.True(t, strings.Contains(err.Error(), c.args[0]) || strings.Contains(err.Error(), c.args[1]), "%v: %v", c.args, err)
	}
}

// TestPeerNotInstalled: without the peers' venv, -peer says so in the JSON
// and ours still runs.
func TestPeerNotInstalled(t *testing.T) {
	t.Setenv(benchutil.PeersVenvEnv, t.TempDir())
	var out bytes.Buffer
	require.NoError(t, execute(append(append([]string(nil), tiny...), "-peer"), &out))
	var r struct {
		Runs []run  `json:"runs"`
		Peer string `json:"peer"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	assert.Contains(t, r.Peer, "not installed: run scripts/install-peers.sh")
	assert.Len(t, r.Runs, 4)
}

// TestPeerRun runs the PyTorch GPT (skipped where scripts/install-peers.sh
// has not run): the same parameter count (checked by runPeer), positive
// rates on 1 and 2 threads, and an initial loss near ln(vocab) like ours.
func TestPeerRun(t *testing.T) {
	if _, err := benchutil.PeerPython(); err != nil {
		t.Skip(err)
	}
	var out bytes.Buffer
	require.NoError(t, execute(append(append([]string(nil), tiny...), "-peer", "-rounds", "1"), &out))
	var r struct {
		Peer    peerReport           `json:"peer"`
		Samples map[string][]float64 `json:"peak_sgemm_samples_gflops"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	assert.NotEmpty(t, r.Peer.Torch)
	assert.Len(t, r.Samples["2"], 3, "the peak is timed again in the round")
	require.Len(t, r.Peer.Results, 2)
	for i, c := range r.Peer.Results {
		assert.Equal(t, i+1, c.Threads)
		assert.Positive(t, c.Ours)
		assert.Positive(t, c.Torch)
		assert.Positive(t, c.TorchMFU)
		assert.InDelta(t, c.OursMFU/c.TorchMFU, c.OursVsTorch, 1e-9)
		assert.Positive(t, c.OursBusy)
		assert.Positive(t, c.TorchBusy)
		assert.InDelta(t, c.Ours/c.Torch, c.OursVsTorch, 1e-9)
		assert.InDelta(t, 5.545, c.TorchLoss, 0.1, "torch loss against ln(256)")
		assert.InDelta(t, 5.545, float64(c.OursLoss), 0.1, "deepgo loss against ln(256)")
	}
}

// TestPeerArgs: the peer runs on the CPU only, and -rounds must be >= 1.
func TestPeerArgs(t *testing.T) {
	assert.ErrorContains(t, execute(append(append([]string(nil), tiny...), "-device", "sim", "-peer"), &bytes.Buffer{}), `-peer with -device "sim"`)
	assert.ErrorContains(t, execute(append(append([]string(nil), tiny...), "-rounds", "0"), &bytes.Buffer{}), "-rounds = 0")
}

// TestCheckpointingMode: -mode checkpointing reports every variant with
// the same loss as its baseline (recomputation changes no bits), fewer
// activation bytes with checkpointing, half the kept boundary bytes per
// rank with partition_activations at TP 2, and cpu_checkpointing's all in
// host memory.
func TestCheckpointingMode(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, execute(append(append([]string(nil), tiny...), "-layers", "2", "-mode", "checkpointing"), &out))
	var r struct {
		Runs []ckptResult `json:"checkpointing"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	require.Len(t, r.Runs, 6)
	for i, c := range r.Runs {
		base := r.Runs[i/3*3]
		assert.Equal(t, base.Loss, c.Loss, c.Name)
		assert.Positive(t, c.StepSeconds, c.Name)
		if c.Name != "none" {
			assert.Less(t, c.BytesRatio, 1.0, c.Name)
		}
	}
	assert.Equal(t, r.Runs[1].SavedBytes/2, r.Runs[2].SavedBytes, "partition_activations at TP 2")
	assert.Zero(t, r.Runs[5].SavedBytes)
	assert.Equal(t, r.Runs[4].SavedBytes, r.Runs[5].HostBytes, "cpu_checkpointing")
	assert.ErrorContains(t, execute(append(append([]string(nil), tiny...), "-mode", "x"), &bytes.Buffer{}), `-mode "x"`)
}

// TestOpsMode: -mode ops times each kernel by name on 1 and 2 threads: the
// GPT's 4 Linears per block plus the head, forward and backward, once per
// step; only the 2-thread run has a pool to count. -cpuprofile writes a
// pprof profile.
func TestOpsMode(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	var out bytes.Buffer
	require.NoError(t, execute(append(append([]string(nil), tiny...), "-mode", "ops", "-cpuprofile", prof), &out))
	var r struct {
		Runs []opsRun `json:"ops"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	require.Len(t, r.Runs, 2)
	for i, run := range r.Runs {
		assert.Equal(t, i+1, run.Threads)
		assert.Positive(t, run.TokensPerSec)
		calls := map[string]float64{}
		sum := run.Between
		for _, o := range run.Ops {
			calls[o.Op] = o.CallsPerStep
			assert.Positive(t, o.MsPerStep, o.Op)
			sum += o.Share
		}
		assert.InDelta(t, 1, sum, 1e-9, "kernel shares and the time between them")
		assert.Equal(t, 5.0, calls["LinearForward"], "one block's 4 Linears and the head")
		assert.Equal(t, 5.0, calls["LinearBackwardWrite"], "each writes its scratch input gradient (backend.GradWriter)")
		assert.Equal(t, 1.0, calls["AttentionForward"])
		assert.Equal(t, 1.0, calls["SoftmaxXentForward"])
		if run.Threads == 1 {
			assert.Zero(t, run.PoolRegions)
			assert.Zero(t, run.PoolIdleShare)
		} else {
			assert.Positive(t, run.PoolRegions)
			assert.True(t, run.PoolIdleShare >= 0 && run.PoolIdleShare < 1, "idle share %v", run.PoolIdleShare)
		}
	}
	st, err := os.Stat(prof)
	require.NoError(t, err)
	assert.Positive(t, st.Size())
	assert.ErrorContains(t, execute(append(append([]string(nil), tiny...), "-cpuprofile", filepath.Join(prof, "x")), &bytes.Buffer{}), "-cpuprofile")
}
