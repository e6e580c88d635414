package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/gloo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lossTolerance is how far (relative) a launched job's final loss may be
// from the in-process ranks': a backend may sum the ranks' gradients in
// another order.
const lossTolerance = 1e-4

// e2eConfig is the demo's ZeRO-2 config with a checkpoint every 20 steps
// when dir is not empty.
func e2eConfig(t *testing.T, saveDir string) string {
	t.Helper()
	ckpt := ""
	if saveDir != "" {
		ckpt = `, "checkpoint": {"save_dir": "` + saveDir + `"}`
	}
	cfg := filepath.Join(t.TempDir(), "ds.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 8, "steps_per_print": 20,
		"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}}`+ckpt+`}`), 0o644))
	return cfg
}

// lastResult is the result JSON, the last line of a run's stdout (a
// launcher's prefix "[rank 0] " or "[mpirun] " taken off).
func lastResult(t *testing.T, stdout string) trainResult {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	if strings.HasPrefix(last, "[") {
		_, last, _ = strings.Cut(last, "] ")
	}
	var res trainResult
	require.NoError(t, json.Unmarshal([]byte(last), &res), "last line %q of\n%s", last, stdout)
	return res
}

// inProcessLoss is the final loss of n in-process ranks.
func inProcessLoss(t *testing.T, cfg string, n int) float64 {
	t.Helper()
	return inProcessLossSteps(t, cfg, n, 40)
}

// launchBackends are the backends between processes this build has, with
// the launcher flags that start a job of them on this machine.
func launchBackends(t *testing.T) map[string][]string {
	b := map[string][]string{}
	if gloo.Available() {
		b["gloo"] = []string{"--master_port", "0"}
	}
	if mpiBuilt {
		b["mpi"] = []string{"--launcher", "mpirun"}
		if os.Getuid() == 0 { // containers: Open MPI refuses root unless told
			t.Setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")
			t.Setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
		}
	}
	if len(b) == 0 {
		t.Skip("this build has no backend between processes (build with -tags gloo or -tags mpi)")
	}
	return b
}

// TestLaunchTrainMatchesInProcess: deepgo launch -- deepgo train on 2 and
// 4 processes ends at the final loss of as many in-process ranks, within
// lossTolerance, for every backend between processes this build has.
func TestLaunchTrainMatchesInProcess(t *testing.T) {
	backends := launchBackends(t)
	t.Setenv("DEEPGO_LAUNCH_TEST", "deepgo")
	cfg := e2eConfig(t, "")
	for _, n := range []int{2, 4} {
		want := inProcessLoss(t, cfg, n)
		for name, flags := range backends {
			args := append(append(flags, "--num_procs", strconv.Itoa(n), "--timeout", "60s", "--"),
				"train", "--config", cfg, "--model", "tiny", "--steps", "40", "--dist-backend", name)
			code, out, errs := launchRun(t, "deepgo", args...)
			require.Zero(t, code, "%s, %d processes:\n%s", name, n, errs)
			res := lastResult(t, out)
			assert.Equal(t, n, res.Ranks)
			assert.InDelta(t, want, res.FinalLoss, lossTolerance*want, "%s, %d processes vs in-process", name, n)
			assert.Equal(t, 1, strings.Count(out, `"final_loss"`), "only rank 0 reports")
		}
	}
}

// TestLaunchTrainTwoNodes: two launches, --node_rank 0 and 1 on loopback,
// train together to the loss of 4 in-process ranks (Gloo).
func TestLaunchTrainTwoNodes(t *testing.T) {
	if !gloo.Available() {
		t.Skip("this build has no Gloo")
	}
	t.Setenv("DEEPGO_LAUNCH_TEST", "deepgo")
	t.Setenv("DEEPGO_JOB_SECRET", "two-nodes-test-secret")
	cfg := e2eConfig(t, "")
	want := inProcessLoss(t, cfg, 4)
	port := strconv.Itoa(freeTestPort(t))
	outs := make([]string, 2)
	var wg sync.WaitGroup
	for node := range 2 {
		wg.Go(func() {
			code, out, errs := launchRun(t, "deepgo", "--num_nodes", "2", "--num_procs", "2", "--node_rank", strconv.Itoa(node),
				"--master_addr", "127.0.0.1", "--master_port", port, "--timeout", "60s", "--",
				"train", "--config", cfg, "--model", "tiny", "--steps", "40")
			assert.Zero(t, code, "node %d:\n%s", node, errs)
			outs[node] = out
		})
	}
	wg.Wait()
	assert.InDelta(t, want, lastResult(t, outs[0]).FinalLoss, lossTolerance*want)
	assert.NotContains(t, outs[1], `"final_loss"`, "only rank 0 reports")
}

// TestLaunchTrainKilledRankRestarts: rank 1 SIGKILLs itself after the
// checkpoint of step 20; without restarts the job fails naming it, and with
// --max_restarts 1 it resumes from that checkpoint and ends at the loss of
// an uninterrupted run (Gloo).
func TestLaunchTrainKilledRankRestarts(t *testing.T) {
	if !gloo.Available() {
		t.Skip("this build has no Gloo")
	}
	t.Setenv("DEEPGO_LAUNCH_TEST", "deepgo-killed")
	want := inProcessLoss(t, e2eConfig(t, ""), 2)
	train := []string{"--", "train", "--model", "tiny", "--steps", "40", "--config"}
	code, _, errs := launchRun(t, "deepgo-killed", append([]string{"--num_procs", "2", "--master_port", "0", "--timeout", "10s", "--grace", "2s"}, append(train, e2eConfig(t, t.TempDir()))...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "rank 1 (pid")
	assert.Contains(t, errs, "was killed by signal 9")
	code, out, errs := launchRun(t, "deepgo-killed", append([]string{"--num_procs", "2", "--master_port", "0", "--timeout", "10s", "--grace", "2s", "--max_restarts", "1"}, append(train, e2eConfig(t, t.TempDir()))...)...)
	require.Zero(t, code, errs)
	assert.Contains(t, errs, "restarting the job (1 of --max_restarts 1)")
	assert.Contains(t, out, "resumed at step 20")
	got := lastResult(t, out).FinalLoss
	assert.True(t, math.Abs(got-want) <= lossTolerance*want, "resumed %v vs uninterrupted %v", got, want)
}

// TestLaunchTrainResumes: a launched job stopped after the checkpoint of
// step 20 and started again resumes there and ends at the loss of an
// uninterrupted launched run, for every backend between processes.
func TestLaunchTrainResumes(t *testing.T) {
	backends := launchBackends(t)
	t.Setenv("DEEPGO_LAUNCH_TEST", "deepgo")
	for name, flags := range backends {
		train := func(cfg string, steps int) string {
			args := append(append(flags, "--num_procs", "2", "--timeout", "60s", "--"),
				"train", "--config", cfg, "--model", "tiny", "--steps", strconv.Itoa(steps), "--dist-backend", name)
			code, out, errs := launchRun(t, "deepgo", args...)
			require.Zero(t, code, "%s:\n%s", name, errs)
			return out
		}
		want := lastResult(t, train(e2eConfig(t, t.TempDir()), 40)).FinalLoss
		cfg := e2eConfig(t, t.TempDir())
		train(cfg, 20)
		out := train(cfg, 40)
		assert.Contains(t, out, "resumed at step 20")
		assert.Equal(t, want, lastResult(t, out).FinalLoss, "%s: resumed vs uninterrupted", name)
	}
}

// TestLaunchTrainPipeline: the pipeline engine over processes (2 stages × 2
// data-parallel ranks, Interleaved, fp32) ends at the loss of the same job
// on in-process ranks, for every backend between processes.
func TestLaunchTrainPipeline(t *testing.T) {
	backends := launchBackends(t)
	t.Setenv("DEEPGO_LAUNCH_TEST", "deepgo")
	cfg := filepath.Join(t.TempDir(), "pipe.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
		"steps_per_print": 10, "pipeline_model_parallel_size": 2,
		"pipeline": {"pipeline_schedule": {"type": "Interleaved", "virtual_stages": 2}},
		"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}}}`), 0o644))
	var out, errb bytes.Buffer
	require.Zero(t, run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", "10", "--ranks", "2"}, &out, &errb), errb.String())
	want := lastResult(t, out.String())
	require.Equal(t, 4, want.Ranks, "2 stages x 2 data-parallel ranks")
	for name, flags := range backends {
		args := append(append(flags, "--num_procs", "4", "--timeout", "60s", "--"),
			"train", "--config", cfg, "--model", "tiny", "--steps", "10", "--dist-backend", name)
		code, pout, errs := launchRun(t, "deepgo", args...)
		require.Zero(t, code, "%s:\n%s", name, errs)
		got := lastResult(t, pout)
		assert.Equal(t, 4, got.Ranks)
		assert.InDelta(t, want.FinalLoss, got.FinalLoss, lossTolerance*want.FinalLoss, "%s: pipeline over processes vs in-process", name)
	}
}

// TestLaunchTrainUnderStoreFlood: while a 2-process Gloo job trains, its
// store is flooded with silent connections past its limit and with clients
// that lack the job secret and try to write keys; each intruder is refused
// and the job ends at the loss of an unflooded run (issue 23).
func TestLaunchTrainUnderStoreFlood(t *testing.T) {
	if !gloo.Available() {
		t.Skip("this build has no Gloo")
	}
	t.Setenv("DEEPGO_LAUNCH_TEST", "deepgo")
	t.Setenv("DEEPGO_STORE_MAX_CONNS", "32")
	cfg := e2eConfig(t, "")
	want := inProcessLossSteps(t, cfg, 2, 200)
	port := freeTestPort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errs := launchRun(t, "deepgo", "--num_procs", "2", "--master_port", strconv.Itoa(port), "--timeout", "60s", "--",
			"train", "--config", cfg, "--model", "tiny", "--steps", "200")
		done <- result{code, out, errs}
	}()
	// wait for the store, then flood it while the job trains
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		require.NoError(t, ctx.Err(), "the job's store never listened")
		time.Sleep(10 * time.Millisecond)
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			held = append(held, c)
		}
	}
	refused := 0
	for i := range 20 {
		s, err := comm.DialStoreOpts(ctx, addr, comm.JobSecret("not-the-job-secret-"+strconv.Itoa(i)))
		if err == nil {
			err = s.Set(ctx, "gloo/world/addr/1", []byte("10.0.0.66:1"))
			s.Close()
		}
		if err != nil {
			refused++
		}
	}
	assert.Equal(t, 20, refused, "every client without the secret is refused")
	r := <-done
	require.Zero(t, r.code, r.err)
	assert.Contains(t, r.err, "deepgo: rendezvous store refused 127.0.0.1:", "rank 0 logs the refusals with the peer's address")
	assert.InDelta(t, want, lastResult(t, r.out).FinalLoss, lossTolerance*want, "the flooded job's loss")
}

// inProcessLossSteps is inProcessLoss for a number of steps.
func inProcessLossSteps(t *testing.T, cfg string, n, steps int) float64 {
	t.Helper()
	var out, errb bytes.Buffer
	code := run([]string{"train", "--config", cfg, "--model", "tiny", "--steps", strconv.Itoa(steps), "--ranks", strconv.Itoa(n)}, &out, &errb)
	require.Zero(t, code, errb.String())
	return lastResult(t, out.String()).FinalLoss
}
