package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSimSmoke: -device sim runs the three AdamW cases on the simulated
// device's optimizer kernels, with every tensor in device memory, and
// reports them against the roof measured on the same device.
func TestSimSmoke(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, execute([]string{"-device", "sim", "-sizes", "1", "-reps", "2", "-threads", "1"}, &out))
	var r deviceReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	assert.Equal(t, "sim:0", r.Device)
	assert.Equal(t, 1, r.Threads)
	assert.Contains(t, r.RoofMethod, "Axpy")
	require.Len(t, r.Results, 3)
	for _, c := range r.Results {
		assert.Equal(t, 1<<20, c.Params, c.Case)
		assert.Positive(t, c.GBps, c.Case)
		assert.Positive(t, c.RoofGBps, c.Case)
		assert.InDelta(t, c.GBps/c.RoofGBps, c.OfRoof, 1e-9, c.Case)
		assert.LessOrEqual(t, c.RoofGBps, r.Roof["1M"], c.Case)
	}
}

// TestArgErrors: each bad flag is named with its value and what is allowed.
func TestArgErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-device", "tpu"}, `-device "tpu"`},
		{[]string{"-device", "cuda:1"}, "only device 0"},
		{[]string{"-sizes", "1,x"}, `"x" is not a count of Mi parameters in [1, 16384]`},
		{[]string{"-sizes", "0"}, `-sizes "0"`},
		{[]string{"-reps", "0"}, "-reps = 0: must be >= 1"},
		{[]string{"-peer-thp"}, "-peer-thp without -peer"},
	} {
		assert.ErrorContains(t, execute(c.args, &bytes.Buffer{}), c.want, "%v", c.args)
	}
}

// TestPeerNotInstalled: without the peers' venv, -peer says so in the JSON
// and ours still runs.
func TestPeerNotInstalled(t *testing.T) {
	t.Setenv(benchutil.PeersVenvEnv, t.TempDir())
	var out bytes.Buffer
	require.NoError(t, execute([]string{"-sizes", "1", "-reps", "1", "-peer"}, &out))
	var r struct {
		Results []result `json:"results"`
		Peer    string   `json:"peer"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	assert.Contains(t, r.Peer, "not installed: run scripts/install-peers.sh")
	assert.NotEmpty(t, r.Results)
}

// TestPeerRun runs the real peers (skipped where scripts/install-peers.sh
// has not run): every size and thread count has positive rates for ours,
// DeepSpeed and torch, and the ratios are theirs.
func TestPeerRun(t *testing.T) {
	if _, err := benchutil.PeerPython(); err != nil {
		t.Skip(err)
	}
	var out bytes.Buffer
	require.NoError(t, execute([]string{"-sizes", "1", "-reps", "2", "-peer", "-rounds", "1"}, &out))
	var r struct {
		Peer peerReport `json:"peer"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	assert.NotEmpty(t, r.Peer.Torch)
	assert.NotEmpty(t, r.Peer.DeepSpeed)
	assert.Contains(t, []string{"fused", "foreach"}, r.Peer.TorchMode)
	require.Len(t, r.Peer.Results, 2)
	for i, c := range r.Peer.Results {
		assert.Equal(t, 1<<20, c.Params)
		assert.Equal(t, i+1, c.Threads)
		for _, v := range []float64{c.Ours, c.DeepSpeed, c.Torch, c.RoofGBps, c.OursBusy, c.DeepSpeedBusy, c.TorchBusy} {
			assert.Positive(t, v, "%+v", c)
		}
		assert.InDelta(t, c.Ours/c.DeepSpeed, c.OursVsDeepSpeed, 1e-9)
		assert.InDelta(t, c.Ours/c.Torch, c.OursVsTorch, 1e-9)
	}
}

// TestPeerOnDevice: the peers run on the CPU only.
func TestPeerOnDevice(t *testing.T) {
	assert.ErrorContains(t, execute([]string{"-device", "sim", "-peer"}, &bytes.Buffer{}), `-peer with -device "sim"`)
	assert.ErrorContains(t, execute([]string{"-rounds", "0"}, &bytes.Buffer{}), "-rounds = 0: must be >= 1")
}

// TestRoundRatios: each round's ratio pairs that round's two rates; the
// median and minimum are over those ratios, not ratios of medians.
func TestRoundRatios(t *testing.T) {
	r, med, lo := roundRatios([]float64{10, 30, 20}, []float64{5, 10, 40})
	assert.Equal(t, []float64{2, 3, 0.5}, r)
	assert.Equal(t, 2.0, med)
	assert.Equal(t, 0.5, lo)
	r, med, lo = roundRatios(nil, nil)
	assert.Nil(t, r)
	assert.Zero(t, med)
	assert.Zero(t, lo)
}

// TestPeerStuck: a peer that never says hello, or never answers a step, or
// ignores "quit", makes the benchmark fail within the timeouts, naming it,
// and is killed, not waited for.
func TestPeerStuck(t *testing.T) {
	defer func(h, s, q time.Duration) { peerHelloTimeout, peerStepTimeout, peerQuitTimeout = h, s, q }(
		peerHelloTimeout, peerStepTimeout, peerQuitTimeout)
	peerHelloTimeout, peerStepTimeout, peerQuitTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	// fake interpreters: the benchmark runs them as `py -c SCRIPT 1 16`
	fake := func(body string) string {
		p := filepath.Join(t.TempDir(), "py")
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
		return p
	}
	t.Run("no hello", func(t *testing.T) {
		start := time.Now()
		_, err := startPeer(context.Background(), fake("exec sleep 60"), 1, []int{16}, false)
		require.ErrorContains(t, err, "peer.py 1 [16]: no answer within 300ms")
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
		assert.Less(t, time.Since(start), 5*time.Second)
	})
	t.Run("stuck step", func(t *testing.T) {
		s, err := startPeer(context.Background(), fake(`echo '{"torch":"t","deepspeed":"d"}'; exec sleep 60`), 1, []int{16}, false)
		require.NoError(t, err)
		assert.Equal(t, "t", s.hello.Torch)
		start := time.Now()
		_, err = s.step("ds", 16)
		assert.ErrorContains(t, err, "no answer within 300ms")
		s.close()
		assert.Less(t, time.Since(start), 5*time.Second)
		assert.NotNil(t, s.cmd.ProcessState, "the peer was reaped")
	})
	t.Run("answers", func(t *testing.T) {
		s, err := startPeer(context.Background(), fake(`echo '{"torch":"t"}'; read a; echo '{"s":0.5,"busy":1}'; read a`), 1, []int{16}, false)
		require.NoError(t, err)
		st, err := s.step("ds", 16)
		require.NoError(t, err)
		assert.Equal(t, peerStep{Seconds: 0.5, Busy: 1}, st)
		s.close()
		assert.True(t, s.cmd.ProcessState.Success(), "it quit on its own")
	})
}
