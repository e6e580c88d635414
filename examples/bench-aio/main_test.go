package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func run(t *testing.T, args ...string) report {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, execute(append([]string{"-dir", t.TempDir(), "-size-mib", "4", "-blocks-mib", "1",
		"-depths", "2,4", "-reps", "2"}, args...), &out))
	var r report
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	return r
}

// TestAlone: without fio the report says so and the engine's rows stand
// alone, write then read, each depth.
func TestAlone(t *testing.T) {
	r := run(t, "-fio", "no-such-fio-binary")
	assert.Contains(t, r.Fio, "not run: fio not found")
	assert.Equal(t, int64(4<<20), r.FileBytes)
	require.Len(t, r.Rows, 4)
	for i, row := range r.Rows {
		assert.Equal(t, []string{"write", "read"}[i/2], row.Op)
		assert.Equal(t, []int{2, 4}[i%2], row.QueueDepth)
		assert.Len(t, row.URingAll, 2)
		assert.Positive(t, row.URingGBps)
		assert.Positive(t, row.ThreadsGBps)
		assert.Zero(t, row.FioGBps)
	}
}

// TestWithFio: fio runs on the same file with the same block and depth and
// its bandwidth is parsed from its JSON.
func TestWithFio(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio not installed (scripts/install-peers.sh)")
	}
	r := run(t)
	assert.Contains(t, r.Fio, "fio-")
	assert.Contains(t, r.FioCommand, "--ioengine=io_uring --direct=1")
	for _, row := range r.Rows {
		assert.Positive(t, row.FioGBps)
		assert.InDelta(t, row.URingGBps/row.FioGBps, row.URingOfFio, 1e-12)
	}
	assert.Positive(t, r.MinURingOf)
}

func TestArgErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-size-mib", "0"}, "-size-mib 0"},
		{[]string{"-blocks-mib", "1,x"}, `-blocks-mib "1,x"`},
		{[]string{"-blocks-mib", "2048"}, "-blocks-mib 2048"},
		{[]string{"-depths", "0"}, `-depths "0"`},
		{[]string{"-reps", "0"}, "-reps 0"},
		{[]string{"-threads", "0"}, "-threads 0"},
		{[]string{"-dir", "/no/such/dir"}, `-dir "/no/such/dir"`},
	} {
		err := execute(c.args, &bytes.Buffer{})
		assert.ErrorContains(t, err, c.want, "%v", c.args)
	}
}
