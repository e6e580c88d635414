package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
)

const helperEnv = "DEEPGO_CKPT_HELPER_DIR"

// TestHelperSaver is the child of TestCrashDuringSave: it saves
// checkpoints of a 2-rank world into $DEEPGO_CKPT_HELPER_DIR, one step
// after another from the latest one, until it is killed.
func TestHelperSaver(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashDuringSave")
	}
	var step int64
	if ck, err := Open(nil, dir, ""); err == nil {
		step = ck.Manifest.Step
		ck.Close()
	}
	cs := newWorld(t, 2, time.Minute)
	os.Stdout.WriteString("saving\n")
	for {
		step++
		states := []*State{synthState(t, 0, 2, step), synthState(t, 1, 2, step)}
		errs := onAll(cs, func(r int, c comm.Comm) error {
			_, err := Save(context.Background(), Options{Dir: dir, Comm: c, Keep: 3}, states[r])
			return err
		})
		for _, err := range errs {
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		freeState(states[0])
		freeState(states[1])
	}
}

// TestCrashDuringSave kills a saving child process with SIGKILL at random
// moments; after each kill the latest checkpoint must load and verify,
// every committed checkpoint must be intact, and progress never goes back.
func TestCrashDuringSave(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in the helper")
	}
	trials := 50
	if testing.Short() {
		trials = 10
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 11))
	deadline := time.Now().Add(45 * time.Second)
	var lastStep int64
	for trial := range trials {
		if time.Now().After(deadline) {
			t.Fatalf("only %d trials in 45 s", trial)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSaver$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if !strings.HasPrefix(line, "saving") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("trial %d: helper said %q", trial, line)
		}
		time.Sleep(time.Duration(rng.IntN(60_000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		ck, err := Open(nil, dir, "")
		if err != nil {
			if lastStep == 0 && errors.Is(err, fs.ErrNotExist) {
				continue // killed before the first commit
			}
			t.Fatalf("trial %d: latest does not open: %v", trial, err)
		}
		if err := ck.Verify(context.Background()); err != nil {
			t.Fatalf("trial %d: latest %s does not verify: %v", trial, ck.Tag, err)
		}
		checkMaster(t, ck, ck.Manifest.Step)
		if ck.Manifest.Step < lastStep {
			t.Fatalf("trial %d: latest went back from step %d to %d", trial, lastStep, ck.Manifest.Step)
		}
		lastStep = ck.Manifest.Step
		ck.Close()
		// Every directory that looks like a checkpoint must be intact.
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			ck, err := Open(nil, dir, e.Name())
			if err != nil {
				t.Fatalf("trial %d: checkpoint %s damaged: %v", trial, e.Name(), err)
			}
			if err := ck.Verify(context.Background()); err != nil {
				t.Fatalf("trial %d: checkpoint %s damaged: %v", trial, e.Name(), err)
			}
			checkMaster(t, ck, ck.Manifest.Step)
			ck.Close()
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, "global_step*"))
	t.Logf("%d kills; reached step %d; %d checkpoints on disk", trials, lastStep, len(left))
}
