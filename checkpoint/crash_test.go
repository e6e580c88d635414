package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/stretchr/testify/require"
)

const helperEnv = "DEEPGO_CKPT_HELPER_DIR"

// crashKeep is how many checkpoints the helper keeps.
const crashKeep = 3

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
			_, err := Save(context.Background(), Options{Dir: dir, Comm: c, Keep: crashKeep}, states[r])
			return err
		})
		for _, err := range errs {
			require.NoError(t, err, "step %d", step)
		}
		freeState(states[0])
		freeState(states[1])
	}
}

// TestCrashDuringSave kills a saving child process with SIGKILL at random
// moments; after each kill the latest checkpoint must load and verify,
// every committed checkpoint must be intact, and progress never goes back.
// The committed checkpoints on disk are counted after each kill; the last
// kill waits for a new commit first, so saves must have committed and the
// last one committed is verified.
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
	commits := 0 // kills after which latest named a newer checkpoint
	for trial := range trials {
		require.False(t, time.Now().After(deadline), "only %d trials in 45 s", trial)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSaver$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		line, _ := bufio.NewReader(out).ReadString('\n')
		if !strings.HasPrefix(line, "saving") {
			cmd.Process.Kill()
			cmd.Wait()
			require.Failf(t, "helper did not start saving", "trial %d: helper said %q", trial, line)
		}
		time.Sleep(time.Duration(rng.IntN(60_000)) * time.Microsecond)
		var stalled error
		if trial == trials-1 {
			stalled = waitForCommit(dir, lastStep, 20*time.Second)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		require.NoError(t, stalled)

		ck, err := Open(nil, dir, "")
		if err != nil {
			if lastStep == 0 && errors.Is(err, fs.ErrNotExist) {
				continue // killed before the first commit
			}
			require.NoError(t, err, "trial %d: latest does not open", trial)
		}
		require.NoError(t, ck.Verify(context.Background()), "trial %d: latest %s does not verify", trial, ck.Tag)
		checkMaster(t, ck, ck.Manifest.Step)
		require.GreaterOrEqual(t, ck.Manifest.Step, lastStep, "trial %d: latest went back", trial)
		if ck.Manifest.Step > lastStep {
			commits++
		}
		lastStep = ck.Manifest.Step
		ck.Close()
		checkCommitted(t, dir, lastStep)
		// Every directory that looks like a checkpoint must be intact.
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			ck, err := Open(nil, dir, e.Name())
			require.NoError(t, err, "trial %d: checkpoint %s damaged", trial, e.Name())
			require.NoError(t, ck.Verify(context.Background()), "trial %d: checkpoint %s damaged", trial, e.Name())
			checkMaster(t, ck, ck.Manifest.Step)
			ck.Close()
		}
	}
	// the last trial verified the commit it waited for
	require.NotZero(t, commits, "%d kills: no checkpoint was ever committed", trials)
	require.NotZero(t, lastStep, "%d kills: no checkpoint was ever committed", trials)
	t.Logf("%d kills; %d of them after a new commit; reached step %d", trials, commits, lastStep)
}

// checkCommitted checks the committed checkpoints of dir when latest names
// step. Steps 1..step were committed in order, step+1 too when a kill
// came between its commit and updating latest; rotation drops only the
// oldest beyond crashKeep (more remain when a kill stops it), so the
// newest crashKeep steps up to step must all be there.
func checkCommitted(t *testing.T, dir string, step int64) {
	t.Helper()
	infos, err := List(nil, dir)
	require.NoError(t, err)
	have := map[int64]bool{}
	for _, in := range infos {
		s := in.Manifest.Step
		require.False(t, s < 1 || s > step+1 || have[s], "committed checkpoint %s has step %d: not new in 1..%d", in.Tag, s, step+1)
		have[in.Manifest.Step] = true
	}
	for s := max(1, step-crashKeep+1); s <= step; s++ {
		require.True(t, have[s], "step %d's checkpoint is not among the %d committed ones on disk", s, len(infos))
	}
}

// waitForCommit waits until latest in dir names a checkpoint past step.
func waitForCommit(dir string, step int64, limit time.Duration) error {
	for start := time.Now(); time.Since(start) < limit; time.Sleep(time.Millisecond) {
		tag, err := ReadLatest(nil, dir)
		if err != nil {
			continue
		}
		if m, err := ReadManifest(nil, dir, tag); err == nil && m.Step > step {
			return nil
		}
	}
	return fmt.Errorf("no checkpoint past step %d committed in %v", step, limit)
}
