package benchutil

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), c.in...)
		assert.Equal(t, c.want, Median(c.in), "%v", c.in)
		assert.Equal(t, in, c.in, "Median changed its input")
	}
}

// TestPeerPythonMissing: a venv without its stamp (install-peers.sh did not
// finish) or without an interpreter is reported as the peers not installed,
// naming what is missing.
func TestPeerPythonMissing(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(PeersVenvEnv, dir)
	assert.Equal(t, dir, PeersVenv())
	_, err := PeerPython()
	require.ErrorIs(t, err, ErrNoPeers)
	assert.ErrorContains(t, err, filepath.Join(dir, PeersStamp))

	require.NoError(t, os.WriteFile(filepath.Join(dir, PeersStamp), nil, 0o644))
	_, err = PeerPython()
	require.ErrorIs(t, err, ErrNoPeers, "a stamp without an interpreter")
	assert.ErrorContains(t, err, filepath.Join(dir, "bin", "python"))

	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin", "python"), nil, 0o755))
	py, err := PeerPython()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "bin", "python"), py)
}

// TestRunPeer runs a real interpreter: the environment and arguments reach
// the script, a log line on stdout before the result is skipped, and a
// failing script or a result that is not JSON is an error naming the peer.
func TestRunPeer(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	var got struct {
		Env  string   `json:"env"`
		Args []string `json:"args"`
	}
	script := "import json, os, sys\nprint('[INFO] a library logs to stdout')\nprint(json.dumps({'env': os.environ['PEER_X'], 'args': sys.argv[1:]}))\n"
	require.NoError(t, RunPeer(context.Background(), py, script, map[string]string{"PEER_X": "7"}, &got, "a", "b"))
	assert.Equal(t, "7", got.Env)
	assert.Equal(t, []string{"a", "b"}, got.Args)

	err = RunPeer(context.Background(), py, "import sys; sys.exit(3)", nil, &got, "z")
	var ee *exec.ExitError
	assert.True(t, errors.As(err, &ee), "%v", err)
	assert.ErrorContains(t, err, "z")
	assert.ErrorContains(t, RunPeer(context.Background(), py, "print('no json')", nil, &got), `"no json" is not the expected JSON`)
}

// TestCPUTime: spinning makes the CPU time grow (by 20 ms within 10 s of
// wall time however loaded the machine), and it never goes back.
func TestCPUTime(t *testing.T) {
	c0 := CPUTime()
	require.Positive(t, c0)
	x, t0 := 1.0, time.Now()
	for CPUTime()-c0 < 20*time.Millisecond {
		require.Less(t, time.Since(t0), 10*time.Second, "CPU time stuck at %v", CPUTime())
		for i := 0; i < 100_000; i++ {
			x = x*1.0000001 + 1e-9
		}
	}
	assert.Positive(t, x)
	assert.GreaterOrEqual(t, CPUTime(), c0+20*time.Millisecond)
}

// TestRunPeerDeadline: a peer still running when ctx's deadline passes is
// killed at once and the error says so, wrapping the deadline.
func TestRunPeerDeadline(t *testing.T) {
	py := filepath.Join(t.TempDir(), "py")
	require.NoError(t, os.WriteFile(py, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	var got struct{}
	err := RunPeer(ctx, py, "unused", nil, &got, "3")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "peer "+py+" 3: killed")
	assert.Less(t, time.Since(start), 5*time.Second)
}
