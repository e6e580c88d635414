package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/internal/proctest"
	"github.com/deepgo-ml/deepgo/rundir"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTrainSaveLinesAndProgress: deepgo train says "saved checkpoint
// DIR/TAG" after each save (steps_per_print 2 of 3 steps: steps 2 and 3),
// and records the steps done and the save directory for the interrupted
// line.
func TestTrainSaveLinesAndProgress(t *testing.T) {
	save := filepath.Join(t.TempDir(), "ck")
	p := resumeConfig(t, save, 0)
	js, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, bytes.Replace(js, []byte(`"steps_per_print": 5`), []byte(`"steps_per_print": 2`), 1), 0o644))
	progress := &trainProgress{}
	var out bytes.Buffer
	_, err = train(p, "", "tiny", 1, 3, trainerArgs{microBatch: 4, lr: 0.01, progress: progress}, &out, io.Discard)
	require.NoError(t, err)
	for _, tag := range []string{"global_step2", "global_step3"} {
		assert.Regexp(t, "(?m)^saved checkpoint "+regexp.QuoteMeta(filepath.Join(save, tag))+"$", out.String())
		assert.DirExists(t, filepath.Join(save, tag))
	}
	assert.Equal(t, "deepgo train: interrupted at step 3 (last checkpoint: "+filepath.Join(save, "global_step3")+")", progress.interruptedLine())
}

// TestWatchInterrupt: on SIGINT or SIGTERM deepgo train says where it
// stood and exits 128+signal (130, 143); other ranks of a launched job exit
// so without a word; a run that ends closes the channel and nothing
// happens.
func TestWatchInterrupt(t *testing.T) {
	saved := t.TempDir()
	saveSteps(t, saved, 4)
	for _, tc := range []struct {
		name   string
		p      *trainProgress
		say    bool
		flush  bool      // a monitor to flush registered
		signal os.Signal // nil: the run ends
		want   string
		code   int
	}{
		{name: "checkpoint", p: &trainProgress{step: 7, saveDir: saved}, say: true, signal: syscall.SIGINT, code: 130,
			want: "deepgo train: interrupted at step 7 (last checkpoint: " + filepath.Join(saved, "global_step4") + ")\n"},
		{name: "SIGTERM", p: &trainProgress{step: 7, saveDir: saved}, say: true, signal: syscall.SIGTERM, code: 143,
			want: "deepgo train: interrupted at step 7 (last checkpoint: " + filepath.Join(saved, "global_step4") + ")\n"},
		{name: "save_dir without checkpoint", p: &trainProgress{step: 2, saveDir: t.TempDir()}, say: true, signal: syscall.SIGINT, code: 130,
			want: "deepgo train: interrupted at step 2 (last checkpoint: none)\n"},
		{name: "no save_dir", p: &trainProgress{}, say: true, signal: syscall.SIGINT, code: 130,
			want: "deepgo train: interrupted before step 1 finished (last checkpoint: none)\n"},
		{name: "not rank 0", p: &trainProgress{step: 7}, signal: syscall.SIGINT, code: 130},
		{name: "not rank 0, SIGTERM", p: &trainProgress{step: 7}, signal: syscall.SIGTERM, code: 143},
		{name: "run ended", p: &trainProgress{step: 7}, say: true, code: -1},
		{name: "monitor flushed first", p: &trainProgress{step: 9}, say: true, flush: true, signal: syscall.SIGTERM, code: 143,
			want: "flushed through step 9\ndeepgo train: interrupted at step 9 (last checkpoint: none)\n"},
		{name: "monitor flushed, not rank 0", p: &trainProgress{step: 9}, flush: true, signal: syscall.SIGINT, code: 130,
			want: "flushed through step 9\n"},
		{name: "run ended, no flush", p: &trainProgress{step: 9}, say: true, flush: true, code: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig := make(chan os.Signal, 1)
			if tc.signal != nil {
				sig <- tc.signal
			} else {
				close(sig)
			}
			var errb bytes.Buffer
			if tc.flush {
				tc.p.atInterrupt(func(step int) error {
					fmt.Fprintf(&errb, "flushed through step %d\n", step)
					return nil
				})
			}
			code := -1
			watchInterrupt(sig, tc.p, tc.say, &errb, func(c int) { code = c })
			assert.Equal(t, tc.code, code)
			assert.Equal(t, tc.want, errb.String())
		})
	}
}

// The flushes on an interrupt report their errors and give up after the
// timeout rather than keep an interrupted process alive.
func TestInterruptFlushAll(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hooks []func(int) error
		err   string
	}{
		{name: "none"},
		{name: "fine", hooks: []func(int) error{func(int) error { return nil }, func(int) error { return nil }}},
		{name: "error", hooks: []func(int) error{func(int) error { return nil }, func(int) error { return errors.New("disk full") }},
			err: "flushing the monitor files: disk full"},
		{name: "stuck", hooks: []func(int) error{func(int) error { select {} }},
			err: "the monitor files were not flushed within 50ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &trainProgress{}
			for _, h := range tc.hooks {
				p.atInterrupt(h)
			}
			err := p.flushAll(3, 50*time.Millisecond)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
	var nilProgress *trainProgress
	nilProgress.atInterrupt(func(int) error { return nil })
	require.NoError(t, nilProgress.flushAll(1, time.Millisecond))
}

// TestTrainSignalled: SIGINT or SIGTERM to a deepgo train process, or
// SIGTERM to the deepgo launch running it (which stops its processes with
// SIGTERM), ends the run with the interrupted line naming the last step and
// checkpoint, exit status 128+signal, and no process left; the csv_monitor
// files hold every step through the one the line names (flushed before the
// exit), and deepgo_run.json names that step. The optimizer state swaps
// to NVMe, and no swap folder is left behind.
func TestTrainSignalled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs deepgo train processes")
	}
	self, err := os.Executable()
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		sig     syscall.Signal
		launch  bool
		code    int    // the exit status of what was signalled
		started string // the stdout line after which the signal is sent
		prefix  string // of deepgo train's lines
		bg      bool   // checkpoint.writer.decoupled: the signal comes with a save in flight
	}{
		{name: "SIGINT", sig: syscall.SIGINT, code: 130, started: "saved checkpoint "},
		{name: "SIGTERM, decoupled", sig: syscall.SIGTERM, code: 143, started: "saved checkpoint ", bg: true},
		{name: "SIGTERM", sig: syscall.SIGTERM, code: 143, started: "saved checkpoint "},
		{name: "SIGTERM to launch", sig: syscall.SIGTERM, launch: true, code: 1, started: "[rank 0] saved checkpoint ", prefix: "[rank 0] "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			save := filepath.Join(t.TempDir(), "ck")
			cfg := resumeConfig(t, save, 2)
			js, err := os.ReadFile(cfg)
			require.NoError(t, err)
			mon := filepath.Join(t.TempDir(), "mon")
			js = bytes.Replace(js, []byte(`"steps_per_print": 5`), []byte(`"steps_per_print": 1`), 1)
			nvme := t.TempDir()
			js = bytes.Replace(js, []byte(`"zero_optimization": {"stage": 2}`),
				[]byte(fmt.Sprintf(`"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": %q}}`, nvme)), 1)
			js = bytes.Replace(js, []byte(`"checkpoint"`), []byte(fmt.Sprintf(`"csv_monitor": {"enabled": true, "output_path": %q, "job_name": "j"},
				"tensorboard": {"enabled": true, "output_path": %q, "job_name": "j"}, "checkpoint"`, mon, mon)), 1)
			if tc.bg {
				js = bytes.Replace(js, []byte(`"checkpoint": {`), []byte(`"checkpoint": {"writer": {"decoupled": true}, `), 1)
			}
			require.NoError(t, os.WriteFile(cfg, js, 0o644))
			args := []string{"train", "--config", cfg, "--model", "tiny", "--ranks", "1", "--steps", "1000000"}
			env := append(os.Environ(), "DEEPGO_LAUNCH_TEST=deepgo")
			pids := t.TempDir()
			if tc.launch {
				args = append([]string{"launch", "--num_procs", "1", "--master_port", "0", "--grace", "10s", "--", self}, args...)
				env = append(os.Environ(), "DEEPGO_LAUNCH_TEST=deepgo-then", "DEEPGO_LAUNCH_TEST_NEXT=deepgo", "DEEPGO_LAUNCH_TEST_PIDS="+pids)
			}
			cmd := exec.Command(self, args...)
			cmd.Env = env
			var errb bytes.Buffer
			cmd.Stderr = &errb
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			waited := make(chan error, 1)
			started := make(chan struct{})
			go func() {
				sc := bufio.NewScanner(out)
				for seen := false; sc.Scan(); {
					if !seen && strings.HasPrefix(sc.Text(), tc.started) {
						seen = true
						close(started)
					}
				}
				waited <- cmd.Wait()
			}()
			select {
			case <-started:
			case err := <-waited:
				t.Fatalf("deepgo ended before its first checkpoint: %v\n%s", err, errb.String())
			case <-time.After(2 * time.Minute):
				cmd.Process.Kill()
				t.Fatalf("no checkpoint after 2 minutes:\n%s", errb.String())
			}
			require.NoError(t, cmd.Process.Signal(tc.sig))
			select {
			case <-waited:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("deepgo did not end 30 s after %v", tc.sig)
			}
			assert.Equal(t, tc.code, cmd.ProcessState.ExitCode(), "stderr:\n%s", errb.String())
			line := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(tc.prefix+"deepgo train: interrupted at step ") + `(\d+) \(last checkpoint: ` + regexp.QuoteMeta(save) + `/global_step(\d+)\)$`)
			m := line.FindStringSubmatch(errb.String())
			require.NotNil(t, m, "no interrupted line naming a checkpoint in stderr:\n%s", errb.String())
			step, _ := strconv.Atoi(m[1])
			saved, _ := strconv.Atoi(m[2])
			assert.GreaterOrEqual(t, step, max(saved, 1), "the interrupted line names a step before its checkpoint")
			if tc.bg { // what latest names was committed whole
				ck, err := checkpoint.Open(nil, save, "")
				require.NoError(t, err)
				assert.Equal(t, checkpoint.DefaultTag(int64(saved)), ck.Tag, "latest")
				assert.NoError(t, ck.Verify(context.Background()), "the latest checkpoint after %v", tc.sig)
				ck.Close()
			}
			left, err := os.ReadDir(nvme)
			require.NoError(t, err)
			assert.Empty(t, left, "swap folders left under nvme_path after %v", tc.sig)
			run, err := rundir.Read(filepath.Join(mon, "j"))
			require.NoError(t, err)
			require.NotNil(t, run.Info)
			assert.Equal(t, int64(step), run.Info.Steps, "deepgo_run.json steps: %s", errb.String())
			assert.Equal(t, int64(4), run.Info.TrainBatchSize, "deepgo_run.json train_batch_size: micro-batch 4 x 1 rank")
			for _, tag := range []string{rundir.TagLoss, rundir.TagLR, rundir.TagGradNorm, rundir.TagStepTimeMS} {
				s := run.Get(tag)
				require.NotNil(t, s, tag)
				_, last, _ := s.Last()
				assert.GreaterOrEqual(t, last, int64(step), "%s: the last step in the csv file vs the interrupted step", tag)
				assert.Equal(t, last, int64(s.Len()), "%s: every step from 1", tag)
			}
			if tc.launch {
				assert.Contains(t, errb.String(), "deepgo launch: stopped every process: terminated")
				ps := readPids(t, pids)
				require.Len(t, ps, 1, "the launched process's pid")
				for name, pid := range ps {
					assert.True(t, proctest.Ended(pid), "%s (pid %d) outlived the launcher", name, pid)
				}
			}
		})
	}
}

// TestWatchInterruptWaitsForSave: on an interrupt, deepgo train first
// waits for the checkpoint being written in the background
// (checkpoint.writer.decoupled), saying so, and its line names that
// checkpoint once committed; a second signal stops the wait at once, and
// the line names the checkpoint before.
func TestWatchInterruptWaitsForSave(t *testing.T) {
	const waiting = "deepgo train: waiting for the checkpoint being written in the background"
	for _, tc := range []struct {
		name   string
		again  bool // a second signal during the wait
		say    bool
		want   []string
		latest string
	}{
		{name: "waited for", say: true, latest: "global_step6",
			want: []string{waiting, "deepgo train: interrupted at step 7 (last checkpoint: %s/global_step6)"}},
		{name: "interrupted again", say: true, again: true, latest: "global_step4",
			want: []string{waiting, "interrupted again: the checkpoint being written in the background is lost", "deepgo train: interrupted at step 7 (last checkpoint: %s/global_step4)"}},
		{name: "not rank 0", latest: "global_step6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			saveSteps(t, dir, 4)
			p := &trainProgress{step: 7, saveDir: dir}
			inFlight := make(chan struct{})
			idle := make(chan struct{})
			close(idle)
			p.atInterruptWait(func() <-chan struct{} { return idle }) // a rank with nothing in flight
			p.atInterruptWait(func() <-chan struct{} { return inFlight })
			sig := make(chan os.Signal, 2)
			sig <- syscall.SIGTERM
			var errb bytes.Buffer
			code := -1
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				watchInterrupt(sig, p, tc.say, &errb, func(c int) { code = c })
			}()
			// the handler waits for the save: it has not exited
			select {
			case <-ended:
				t.Fatal("the handler exited with a save in flight")
			case <-time.After(100 * time.Millisecond):
			}
			if tc.again {
				sig <- syscall.SIGINT
			} else {
				saveSteps(t, dir, 6) // the background save commits
				close(inFlight)
			}
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("the handler did not exit")
			}
			assert.Equal(t, 143, code, "the first signal's status")
			for _, w := range tc.want {
				if strings.Contains(w, "%s") {
					w = fmt.Sprintf(w, dir)
				}
				assert.Contains(t, errb.String(), w)
			}
			if len(tc.want) == 0 {
				assert.Empty(t, errb.String())
			}
			tag, err := checkpoint.ReadLatest(nil, dir)
			require.NoError(t, err)
			if !tc.again {
				assert.Equal(t, tc.latest, tag)
			}
		})
	}
}

// A rank failing while an interrupt is handled (its flushes removed the
// swap files a Save reads) waits for the interrupt's exit instead of
// exiting first with status 1: awaitInterrupt says whether one began and
// returns its status once its exit returned (a test's) or after max.
func TestAwaitInterrupt(t *testing.T) {
	p := &trainProgress{}
	_, ok := p.awaitInterrupt(time.Hour)
	assert.False(t, ok, "no interrupt: no wait")

	sig := make(chan os.Signal, 1)
	release := make(chan struct{})
	go watchInterrupt(sig, p, false, io.Discard, func(int) { <-release })
	sig <- syscall.SIGTERM
	require.Eventually(t, func() bool { _, ok := p.awaitInterrupt(time.Millisecond); return ok }, 10*time.Second, time.Millisecond, "the interrupt began")
	t0 := time.Now()
	code, ok := p.awaitInterrupt(50 * time.Millisecond)
	assert.True(t, ok)
	assert.Equal(t, 143, code)
	assert.GreaterOrEqual(t, time.Since(t0), 50*time.Millisecond, "waits while the exit has not happened")
	close(release)
	code, ok = p.awaitInterrupt(time.Hour)
	assert.True(t, ok && code == 143, "returns once the exit returned: %d %v", code, ok)
}
