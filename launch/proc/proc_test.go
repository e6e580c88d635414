package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/internal/proctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary is also the processes the tests start: PROC_HELPER
// names what it does.
func TestMain(m *testing.M) { proctest.Main(m, "PROC_HELPER", helper) }

func helper(role string) int {
	rank := os.Getenv("RANK")
	proctest.WritePid("PROC_PIDDIR", rank+".pid")
	switch role {
	case "ok":
		fmt.Printf("hello from %s\npartial line", rank)
		return 0
	case "fail":
		if os.Getenv("IGNORE_TERM") != "" {
			signal.Ignore(syscall.SIGTERM)
		}
		if rank != os.Getenv("FAIL_RANK") {
			time.Sleep(time.Minute)
			return 0
		}
		for i := range 25 {
			fmt.Fprintf(os.Stderr, "stderr line %d\n", i)
		}
		time.Sleep(200 * time.Millisecond)
		if os.Getenv("FAIL_HOW") == "kill" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		return 3
	case "launcher": // a launcher of two sleepers, for the test to kill
		procs := specs(2, "sleep", os.Getenv("PROC_PIDDIR"))
		Run(context.Background(), procs, Options{})
		return 0
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	}
	return 2
}

func specs(n int, role, piddir string, extra ...string) []Spec {
	self, _ := os.Executable()
	out := make([]Spec, n)
	for r := range out {
		env := append(os.Environ(), "PROC_HELPER="+role, "RANK="+strconv.Itoa(r), "PROC_PIDDIR="+piddir)
		out[r] = Spec{Rank: r, Argv: []string{self}, Env: append(env, extra...)}
	}
	return out
}

type pids struct {
	mu sync.Mutex
	m  map[int]int
}

func (p *pids) started(rank, pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[int]int{}
	}
	p.m[rank] = pid
}

// assertGone asserts that every process started has ended.
func (p *pids) assertGone(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for r, pid := range p.m {
		assert.True(t, proctest.Ended(pid), "rank %d (pid %d) is still running", r, pid)
	}
}

func TestRunPrefixesOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, Run(ctx, specs(3, "ok", ""), Options{Stdout: &out}))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Len(t, lines, 6)
	for r := range 3 {
		assert.Contains(t, lines, fmt.Sprintf("[rank %d] hello from %d", r, r))
		assert.Contains(t, lines, fmt.Sprintf("[rank %d] partial line", r))
	}
}

// TestRunStopsOnFailure: one rank exits 3 or kills itself while the others
// sleep; Run returns within the grace period naming it with its last 20
// stderr lines, and no process of the job is left.
func TestRunStopsOnFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extra  []string
		want   string
		code   int
		signal syscall.Signal
	}{
		{name: "exit 3", extra: []string{"FAIL_RANK=2"}, want: "rank 2 (pid", code: 3},
		{name: "SIGKILL", extra: []string{"FAIL_RANK=1", "FAIL_HOW=kill"}, want: "was killed by signal 9 (killed)", code: -1, signal: syscall.SIGKILL},
		{name: "others ignore SIGTERM", extra: []string{"FAIL_RANK=0", "IGNORE_TERM=1"}, want: "exited with code 3", code: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var p pids
			var errb bytes.Buffer
			grace := time.Second
			t0 := time.Now()
			err := Run(ctx, specs(4, "fail", t.TempDir(), tc.extra...), Options{Grace: grace, Stderr: &errb, Started: p.started})
			took := time.Since(t0)
			var f *Failure
			require.ErrorAs(t, err, &f)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, tc.code, f.Code)
			assert.Equal(t, tc.signal, f.Signal)
			require.Len(t, f.Tail, 20, "the last 20 stderr lines")
			assert.Equal(t, "stderr line 5", f.Tail[0])
			assert.Equal(t, "stderr line 24", f.Tail[19])
			assert.Less(t, took, grace+5*time.Second, "Run took %v", took)
			assert.Contains(t, errb.String(), "stderr line 0")
			require.Len(t, p.m, 4)
			p.assertGone(t)
		})
	}
}

// TestRunStopsOnCancel: the launcher's SIGINT/SIGTERM (its context) stops
// every process.
func TestRunStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var p pids
	stop, stopNow := context.WithCancel(ctx)
	time.AfterFunc(300*time.Millisecond, stopNow)
	err := Run(stop, specs(2, "sleep", ""), Options{Grace: time.Second, Started: p.started})
	var s *Stopped
	require.ErrorAs(t, err, &s)
	assert.True(t, errors.Is(err, context.Canceled))
	p.assertGone(t)
}

func TestRunBadCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var p pids
	procs := specs(2, "sleep", "")
	procs[1].Argv = []string{"/nonexistent/program"}
	err := Run(ctx, procs, Options{Grace: time.Second, Started: p.started})
	assert.ErrorContains(t, err, `rank 1: start ["/nonexistent/program"]`)
	assert.True(t, proctest.Ended(p.m[0]), "rank 0 is still running")
}

// TestKilledLauncherLeavesNoChild: SIGKILL of the launcher kills its
// processes (Pdeathsig).
func TestKilledLauncherLeavesNoChild(t *testing.T) {
	dir := t.TempDir()
	self, _ := os.Executable()
	launcher := exec.Command(self)
	launcher.Env = append(os.Environ(), "PROC_HELPER=launcher", "PROC_PIDDIR="+dir)
	require.NoError(t, launcher.Start())
	var children []int
	deadline := time.Now().Add(20 * time.Second)
	for len(children) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		children = children[:0]
		for r := range 2 {
			if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d.pid", r))); err == nil && len(b) > 0 {
				pid, _ := strconv.Atoi(string(b))
				children = append(children, pid)
			}
		}
	}
	require.Len(t, children, 2, "the launcher's processes did not start")
	require.NoError(t, launcher.Process.Kill())
	launcher.Wait()
	for _, pid := range children {
		deadline := time.Now().Add(5 * time.Second)
		for !proctest.Ended(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !assert.True(t, proctest.Ended(pid), "pid %d outlived its killed launcher", pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
