//go:build gloo

package gloo

// The tests run each rank as a process: the test binary re-executes itself
// with childScenario set (and RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// as torchrun sets them), TestMain runs the scenario there, and the parent
// test checks every child's exit status and output.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/stretchr/testify/require"
)

const (
	childScenario = "DG_GLOO_TEST_SCENARIO"
	childTimeout  = "DG_GLOO_TEST_TIMEOUT"
)

func TestMain(m *testing.M) {
	if s := os.Getenv(childScenario); s != "" {
		os.Exit(runChild(s))
	}
	os.Exit(m.Run())
}

// scenario is one rank's part of a multi-process test; an error fails the
// rank (exit status 1, the error on stderr).
type scenario func(ctx context.Context, c comm.Comm) error

var scenarios = map[string]scenario{
	"ops":         scenarioOps,
	"split":       scenarioSplit,
	"mismatch":    scenarioMismatch,
	"invalid":     scenarioInvalid,
	"missing":     scenarioMissing,
	"cancel":      scenarioCancel,
	"cancel-late": scenarioCancelLate,
	"die-between": scenarioDieBetween,
	"die-during":  scenarioDieDuring,
	"die-root":    scenarioDieRoot,
}

// exitDied is the status of the rank a fault scenario kills.
const exitDied = 3

func runChild(name string) int {
	env, err := comm.EnvFromOS()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	timeout, err := time.ParseDuration(os.Getenv(childTimeout))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	c, release, err := FromEnvOf(ctx, env, Options{Timeout: timeout, Threads: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	code := 0
	if err := scenarios[name](ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", env.Rank, err)
		code = 1
	}
	c.Close()
	release()
	return code
}

// child is one finished rank.
type child struct {
	code           int
	stdout, stderr string
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// spawn runs scenario on n processes with the given operation timeout and
// kills them all if they outlive limit (a hang fails the test).
func spawn(t *testing.T, n int, scenario string, timeout, limit time.Duration) ([]child, time.Duration) {
	t.Helper()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	outs := make([][2]*bytes.Buffer, n)
	start := time.Now()
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childScenario+"="+scenario, childTimeout+"="+timeout.String(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n), "LOCAL_RANK="+strconv.Itoa(r),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		outs[r] = [2]*bytes.Buffer{{}, {}}
		cmd.Stdout, cmd.Stderr = outs[r][0], outs[r][1]
		require.NoError(t, cmd.Start())
		cmds[r] = cmd
	}
	res := make([]child, n)
	for r, cmd := range cmds {
		err := cmd.Wait()
		res[r] = child{code: cmd.ProcessState.ExitCode(), stdout: outs[r][0].String(),
			stderr: cmd.ProcessState.String() + "\n" + outs[r][1].String()}
		if err != nil && ctx.Err() != nil {
			t.Errorf("rank %d still running after %v: killed (a hang)", r, limit)
		}
	}
	return res, time.Since(start)
}

func requireAllOK(t *testing.T, res []child) {
	t.Helper()
	for r, c := range res {
		if c.code != 0 {
			t.Errorf("rank %d exited %d\nstderr:\n%s\nstdout:\n%s", r, c.code, c.stderr, c.stdout)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func TestProcesses(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, sc := range []string{"ops", "split", "mismatch", "invalid"} {
			t.Run(fmt.Sprintf("%s/%d", sc, n), func(t *testing.T) {
				res, _ := spawn(t, n, sc, 30*time.Second, 3*time.Minute)
				requireAllOK(t, res)
				for r, c := range res {
					if s := strings.TrimSpace(c.stdout); s != "" {
						t.Logf("rank %d: %s", r, s)
					}
				}
			})
		}
	}
}

// TestFaults: a rank that does not call, or whose process exits, makes
// every other rank fail within the deadline with an error naming it (the
// scenarios check the error; here the exit statuses and the time).
func TestFaults(t *testing.T) {
	const timeout = 4 * time.Second
	for _, n := range []int{2, 4} {
		for _, sc := range []string{"missing", "cancel", "cancel-late", "die-between", "die-during", "die-root"} {
			t.Run(fmt.Sprintf("%s/%d", sc, n), func(t *testing.T) {
				res, took := spawn(t, n, sc, timeout, timeout+30*time.Second)
				for r, c := range res {
					want := 0
					victim := n - 1
					if sc == "die-root" {
						victim = 0
					}
					if r == victim && strings.HasPrefix(sc, "die") {
						want = exitDied
					}
					require.Equal(t, want, c.code, "rank %d exited %d\nstderr:\n%s\nstdout:\n%s", r, c.code, c.stderr, c.stdout)
					if s := strings.TrimSpace(c.stdout); s != "" {
						t.Logf("rank %d: %s", r, s)
					}
				}
				// Startup (exec, rendezvous) plus one deadline and slack.
				require.Less(t, took, timeout+15*time.Second, "the survivors took %v", took)
			})
		}
	}
}

// wantFault checks that err is an *Error wrapping one of sentinels whose
// Ranks are exactly ranks.
func wantFault(err error, ranks []int, sentinels ...error) error {
	var ce *comm.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("want a *comm.Error naming ranks %v, got %v", ranks, err)
	}
	ok := false
	for _, s := range sentinels {
		ok = ok || errors.Is(err, s)
	}
	if !ok {
		return fmt.Errorf("want one of %v, got %w", sentinels, err)
	}
	if fmt.Sprint(ce.Ranks) != fmt.Sprint(ranks) {
		return fmt.Errorf("want ranks %v named, got %w", ranks, err)
	}
	fmt.Printf("as expected: %v\n", err)
	return nil
}
