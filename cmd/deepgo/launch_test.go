package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/internal/proctest"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary is also the program deepgo launch runs in these tests:
// DEEPGO_LAUNCH_TEST names what it does.
func TestMain(m *testing.M) { proctest.Main(m, "DEEPGO_LAUNCH_TEST", launchHelper) }

func launchHelper(role string) int {
	rank := os.Getenv("RANK")
	proctest.WritePid("DEEPGO_LAUNCH_TEST_PIDS", rank+"."+os.Getenv("DEEPGO_RESTART_COUNT"))
	switch role {
	case "deepgo":
		return run(os.Args[1:], os.Stdout, os.Stderr)
	case "deepgo-then": // deepgo, whose processes take the role DEEPGO_LAUNCH_TEST_NEXT
		os.Setenv("DEEPGO_LAUNCH_TEST", os.Getenv("DEEPGO_LAUNCH_TEST_NEXT"))
		return run(os.Args[1:], os.Stdout, os.Stderr)
	case "deepgo-killed": // deepgo, whose rank 1 SIGKILLs itself in its first run once step 20 is saved
		if rank == "1" && os.Getenv("DEEPGO_RESTART_COUNT") == "0" {
			go killAfterCheckpoint(os.Args[1:], "global_step20")
		}
		return run(os.Args[1:], os.Stdout, os.Stderr)
	case "env":
		var kv []string
		for _, k := range []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "CUDA_VISIBLE_DEVICES", "DEEPGO_RESTART_COUNT", "DEEPGO_TIMEOUT"} {
			kv = append(kv, k+"="+os.Getenv(k))
		}
		fmt.Println(strings.Join(kv, " "), "secret_len="+strconv.Itoa(len(os.Getenv("DEEPGO_JOB_SECRET"))))
		return 0
	case "agree": // meet at rank 0's store and agree on a config, as deepgo train does
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		env, err := comm.EnvFromOS()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		store, server, err := comm.Rendezvous(ctx, env)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer store.Close()
		if server != nil {
			defer server.Close()
		}
		if err := comm.AgreeOnConfig(ctx, store, env.Rank, env.WorldSize, "test", []byte("the config")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		store.Set(ctx, "done/"+rank, nil)
		if env.Rank == 0 { // serve the store until every rank is done with it
			var keys []string
			for r := range env.WorldSize {
				keys = append(keys, "done/"+strconv.Itoa(r))
			}
			if err := store.Wait(ctx, keys...); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		fmt.Printf("agreed rank %d of %d\n", env.Rank, env.WorldSize)
		return 0
	case "fail": // FAIL_RANK fails in its first FAIL_RUNS runs (all when unset), the others sleep
		runs, err := strconv.Atoi(os.Getenv("FAIL_RUNS"))
		if err != nil {
			runs = 1 << 30
		}
		restart, _ := strconv.Atoi(os.Getenv("DEEPGO_RESTART_COUNT"))
		if restart >= runs {
			return 0
		}
		if rank != os.Getenv("FAIL_RANK") {
			time.Sleep(time.Minute)
			return 0
		}
		for i := range 25 {
			fmt.Fprintf(os.Stderr, "stderr line %d\n", i)
		}
		time.Sleep(300 * time.Millisecond)
		if os.Getenv("FAIL_HOW") == "kill" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		return 3
	}
	return 2
}

// killAfterCheckpoint SIGKILLs this process once the save_dir of the
// config deepgo train's args name holds tag.
func killAfterCheckpoint(args []string, tag string) {
	i := slices.Index(args, "--config")
	cfg, err := config.Load(args[i+1])
	if err != nil {
		panic(err)
	}
	for {
		if got, _ := checkpoint.ReadLatest(nil, cfg.Checkpoint.SaveDir); got == tag {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// launchRun runs deepgo launch flags with the test binary as the program
// (in the role DEEPGO_LAUNCH_TEST names), given the arguments after a "--"
// in flags.
func launchRun(t *testing.T, role string, flags ...string) (code int, stdout, stderr string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	var out, errb bytes.Buffer
	var prog []string // what follows a "--" in flags: the program's arguments
	for i, f := range flags {
		if f == "--" {
			flags, prog = flags[:i], flags[i+1:]
			break
		}
	}
	args := append(append(append([]string{"launch"}, flags...), "--", self), prog...)
	done := make(chan int, 1)
	go func() { done <- run(args, &out, &errb) }()
	select {
	case code = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("deepgo launch %v did not end in 60 s", flags)
	}
	return code, out.String(), errb.String()
}

var envLine = regexp.MustCompile(`^\[rank (\d+)\] (.*)$`)

// rankEnvs maps each rank to the variables it printed.
func rankEnvs(t *testing.T, stdout string) map[int]map[string]string {
	t.Helper()
	got := map[int]map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(stdout), "\n") {
		m := envLine.FindStringSubmatch(line)
		require.NotNil(t, m, "line %q", line)
		r, _ := strconv.Atoi(m[1])
		got[r] = map[string]string{}
		for kv := range strings.FieldsSeq(m[2]) {
			k, v, _ := strings.Cut(kv, "=")
			got[r][k] = v
		}
	}
	return got
}

func TestLaunchEnv(t *testing.T) {
	t.Setenv("DEEPGO_LAUNCH_TEST", "env")
	t.Setenv("DEEPGO_JOB_SECRET", "")
	for _, n := range []int{2, 4} {
		code, out, errs := launchRun(t, "env", "--num_procs", strconv.Itoa(n), "--master_port", "0", "--timeout", "90s")
		require.Zero(t, code, errs)
		got := rankEnvs(t, out)
		require.Len(t, got, n)
		for r := range n {
			want := map[string]string{"RANK": strconv.Itoa(r), "LOCAL_RANK": strconv.Itoa(r), "WORLD_SIZE": strconv.Itoa(n), "LOCAL_WORLD_SIZE": strconv.Itoa(n),
				"NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "CUDA_VISIBLE_DEVICES": os.Getenv("CUDA_VISIBLE_DEVICES"), "DEEPGO_RESTART_COUNT": "0", "DEEPGO_TIMEOUT": "1m30s",
				"secret_len": "64"}
			assert.Equal(t, want, got[r], "rank %d", r)
		}
	}
	// --num_gpus names each node's devices
	code, out, errs := launchRun(t, "env", "--num_gpus", "2", "--master_port", "0")
	require.Zero(t, code, errs)
	for r, kv := range rankEnvs(t, out) {
		assert.Equal(t, "0,1", kv["CUDA_VISIBLE_DEVICES"], "rank %d", r)
	}
}

// TestLaunchTwoNodes: two launches with --node_rank 0 and 1 on loopback
// make one job of 4 ranks that meet at rank 0's store and agree.
func TestLaunchTwoNodes(t *testing.T) {
	t.Setenv("DEEPGO_LAUNCH_TEST", "agree")
	port := strconv.Itoa(freeTestPort(t))
	common := []string{"--num_nodes", "2", "--num_procs", "2", "--master_addr", "127.0.0.1", "--master_port", port}
	code, _, errs := launchRun(t, "agree", append(common, "--node_rank", "1")...)
	require.Equal(t, 1, code)
	assert.Contains(t, errs, "needs the same DEEPGO_JOB_SECRET on every node")
	t.Setenv("DEEPGO_JOB_SECRET", "short")
	code, _, errs = launchRun(t, "agree", append(common, "--node_rank", "0")...)
	require.Equal(t, 1, code)
	assert.Contains(t, errs, "DEEPGO_JOB_SECRET has 5 characters: want at least 16")
	t.Setenv("DEEPGO_JOB_SECRET", "test-secret-of-two-nodes")
	var wg sync.WaitGroup
	outs := make([]string, 2)
	for node := range 2 {
		wg.Go(func() {
			code, out, errs := launchRun(t, "agree", append(common, "--node_rank", strconv.Itoa(node))...)
			assert.Zero(t, code, "node %d: %s", node, errs)
			outs[node] = out
		})
	}
	wg.Wait()
	assert.ElementsMatch(t, []string{"[rank 0] agreed rank 0 of 4", "[rank 1] agreed rank 1 of 4"}, strings.Split(strings.TrimSpace(outs[0]), "\n"))
	assert.ElementsMatch(t, []string{"[rank 2] agreed rank 2 of 4", "[rank 3] agreed rank 3 of 4"}, strings.Split(strings.TrimSpace(outs[1]), "\n"))
}

func freeTestPort(t *testing.T) int {
	p, err := pickPort("127.0.0.1")
	require.NoError(t, err)
	return p
}

// TestLaunchFailure: one rank exits 3 or kills itself while the others
// sleep; the launcher exits non-zero within the grace period and a few
// seconds, naming the rank with its last stderr lines, and no process is
// left.
func TestLaunchFailure(t *testing.T) {
	t.Setenv("DEEPGO_LAUNCH_TEST", "fail")
	for _, tc := range []struct{ how, want string }{{"exit", "rank 1 (pid %d) exited with code 3"}, {"kill", "rank 1 (pid %d) was killed by signal 9"}} {
		t.Run(tc.how, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("DEEPGO_LAUNCH_TEST_PIDS", dir)
			t.Setenv("FAIL_RANK", "1")
			t.Setenv("FAIL_HOW", tc.how)
			t0 := time.Now()
			code, _, errs := launchRun(t, "fail", "--num_procs", "3", "--master_port", "0", "--grace", "1s")
			assert.Less(t, time.Since(t0), 6*time.Second)
			assert.Equal(t, 1, code)
			pids := readPids(t, dir)
			require.Len(t, pids, 3)
			assert.Contains(t, errs, "deepgo launch: "+fmt.Sprintf(tc.want, pids["1.0"]))
			assert.Contains(t, errs, "its last 20 stderr lines:\n    stderr line 5\n")
			assert.Contains(t, errs, "    stderr line 24\n")
			for name, pid := range pids {
				assert.True(t, proctest.Ended(pid), "%s (pid %d) is still running", name, pid)
			}
		})
	}
}

// TestLaunchMaxRestarts: a job whose rank 1 fails on the first run only
// succeeds with --max_restarts 1, and fails without.
func TestLaunchMaxRestarts(t *testing.T) {
	t.Setenv("DEEPGO_LAUNCH_TEST", "fail")
	t.Setenv("FAIL_RANK", "1")
	t.Setenv("FAIL_RUNS", "1")
	dir := t.TempDir()
	t.Setenv("DEEPGO_LAUNCH_TEST_PIDS", dir)
	code, _, errs := launchRun(t, "fail", "--num_procs", "2", "--master_port", "0", "--grace", "1s", "--max_restarts", "1")
	assert.Zero(t, code, errs)
	assert.Contains(t, errs, "rank 1 (pid")
	assert.Contains(t, errs, "deepgo launch: restarting the job (1 of --max_restarts 1)")
	names := slices.Collect(func(yield func(string) bool) {
		for n := range readPids(t, dir) {
			yield(n)
		}
	})
	sort.Strings(names)
	assert.Equal(t, []string{"0.0", "0.1", "1.0", "1.1"}, names, "each rank ran twice, with DEEPGO_RESTART_COUNT 0 then 1")
	code, _, errs = launchRun(t, "fail", "--num_procs", "2", "--master_port", "0", "--grace", "1s")
	assert.Equal(t, 1, code)
	assert.NotContains(t, errs, "restarting")
}

func TestLaunchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--num_procs", "2"}, "no program"},
		{[]string{"--num_procs", "2", "--num_gpus", "2", "--", "true"}, "--num_gpus and --num_procs are the same setting"},
		{[]string{"--hostfile", "/nonexistent", "--", "true"}, "--hostfile: open /nonexistent"},
		{[]string{"--launcher", "torchrun", "--", "true"}, `--launcher "torchrun": want one of`},
		{[]string{"--num_nodes", "2", "--master_port", "0", "--", "true"}, "--master_port 0 (a free port) only works"},
		{[]string{"--num_procs", "-1", "--", "true"}, "--num_procs -1: want >= 1"},
		{[]string{"--num_procs", "0", "--", "true"}, "--num_procs 0: want >= 1"},
		{[]string{"--num_gpus", "-2", "--", "true"}, "--num_gpus -2: want >= 0"},
		{[]string{"--num_nodes", "-1", "--", "true"}, "--num_nodes -1: want >= 0"},
		{[]string{"--node_rank", "-1", "--", "true"}, "--node_rank -1: want >= 0"},
		{[]string{"--max_restarts", "-1", "--", "true"}, "--max_restarts -1: want >= 0"},
		{[]string{"--grace", "-1s", "--", "true"}, "--grace -1s: want > 0"},
		{[]string{"--timeout", "-2s", "--", "true"}, "--timeout -2s: want >= 0"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"launch"}, tc.args...), &out, &errb)
		assert.NotZero(t, code, "%v", tc.args)
		assert.Contains(t, errb.String(), tc.want, "%v", tc.args)
	}
}

func readPids(t *testing.T, dir string) map[string]int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	pids := map[string]int{}
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		pids[e.Name()], _ = strconv.Atoi(string(b))
	}
	return pids
}

// TestLaunchSignalled: SIGTERM or SIGINT to deepgo launch stops its
// processes and exits 1; SIGKILL takes them along (Pdeathsig).
func TestLaunchSignalled(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			var errb bytes.Buffer
			launcher := exec.Command(self, "launch", "--num_procs", "2", "--master_port", "0", "--grace", "1s", "--", self)
			launcher.Env = append(os.Environ(), "DEEPGO_LAUNCH_TEST=deepgo-then", "DEEPGO_LAUNCH_TEST_NEXT=fail", "FAIL_RANK=none", "DEEPGO_LAUNCH_TEST_PIDS="+dir)
			launcher.Stderr = &errb
			require.NoError(t, launcher.Start())
			deadline := time.Now().Add(20 * time.Second)
			for len(readPids(t, dir)) < 2 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			pids := readPids(t, dir)
			require.Len(t, pids, 2, "the processes did not start")
			t0 := time.Now()
			require.NoError(t, launcher.Process.Signal(sig))
			waited := make(chan error, 1)
			go func() { waited <- launcher.Wait() }()
			select {
			case <-waited:
			case <-time.After(10 * time.Second):
				launcher.Process.Kill()
				t.Fatalf("deepgo launch did not end 10 s after %v", sig)
			}
			assert.Less(t, time.Since(t0), 6*time.Second)
			if sig != syscall.SIGKILL {
				assert.Equal(t, 1, launcher.ProcessState.ExitCode())
				assert.Contains(t, errb.String(), "deepgo launch: stopped every process: "+strings.ToLower(sig.String()))
			}
			for name, pid := range pids {
				deadline := time.Now().Add(5 * time.Second)
				for !proctest.Ended(pid) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if !assert.True(t, proctest.Ended(pid), "%s (pid %d) outlived the launcher", name, pid) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
}
