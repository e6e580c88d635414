package deepgo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/deepgo-ml/deepgo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// asyncParCases are the background-save tables' runs of the data-parallel
// engine: data parallelism alone, TP 2 alone and TP 2 × DP 2 (ZeRO 1 and
// 3, where TP rank 0 collects its peers' shards and writes them).
func asyncParCases() []parDevCase {
	return []parDevCase{
		{dp: 2, stage: 2},
		{tp: 2, dp: 1},
		{tp: 2, dp: 2, stage: 1},
		{tp: 2, dp: 2, stage: 3, prec: "bf16"},
	}
}

// asyncPipeCases are the background-save tables' pipelines: PP alone,
// PP × DP, PP × TP.
func asyncPipeCases() []pipeDevCase {
	return []pipeDevCase{
		{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1},
		{pp: 2, dp: 2, gas: 2, sched: "1F1B", virtual: 1, prec: "bf16"},
		{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, tp: 2},
	}
}

// asyncSteps and asyncMid: the tables' runs train asyncSteps steps and
// save after asyncMid.
const asyncSteps, asyncMid = 4, 2

// segmentRunner runs one case's segment on a device and returns rank 0's
// result.
type segmentRunner func(t *testing.T, dev string, seg parSeg) (*result, error)

func parRunner(c parDevCase) segmentRunner {
	return func(t *testing.T, dev string, seg parSeg) (*result, error) { return parDevSegment(t, dev, c, seg) }
}

func pipeRunner(c pipeDevCase) segmentRunner {
	return func(t *testing.T, dev string, seg parSeg) (*result, error) {
		r, err := pipeDevSegment(t, dev, c, seg)
		if err != nil {
			return nil, err
		}
		return &r.result, nil
	}
}

// asyncCase is one run of the background-save tables.
type asyncCase struct {
	name, prec string
	run        segmentRunner
}

// asyncCases are both engines' background-save cases.
func asyncCases() []asyncCase {
	var out []asyncCase
	for _, c := range asyncParCases() {
		out = append(out, asyncCase{"engine/" + c.String(), c.prec, parRunner(c)})
	}
	for _, c := range asyncPipeCases() {
		out = append(out, asyncCase{"pipe/" + c.String(), c.prec, pipeRunner(c)})
	}
	return out
}

// TestSaveAsyncMatchesSave: for the data-parallel engine (DP alone, TP 2,
// TP 2 × DP 2) and the pipeline engine (PP, PP × DP, PP × TP), on the CPU
// backend and on the simulated device with kernel delays, a Save and a
// SaveAsync of the same state (after 2 of 4 steps; the background save is
// written while the last 2 train) write the same files byte for byte,
// saving does not change the training (losses and parameters of the run
// without saves, bit for bit), and a resume from the background save's
// checkpoint trains the last 2 steps as the uninterrupted run does, bit
// for bit.
func TestSaveAsyncMatchesSave(t *testing.T) {
	for _, c := range asyncCases() {
		t.Run(c.name, func(t *testing.T) {
			requireAsyncMatchesSave(t, c.run, []string{"", "sim+delay"}, bitEqualRuns)
		})
	}
}

// requireAsyncMatchesSave is TestSaveAsyncMatchesSave's check of one case
// on each of devs, against the CPU backend's run without saves: same
// compares a run with it (and a resumed run with its last steps).
func requireAsyncMatchesSave(t *testing.T, run segmentRunner, devs []string, same func(t *testing.T, want, got *result)) {
	t.Helper()
	want, err := run(t, "", parSeg{to: asyncSteps})
	require.NoError(t, err, "uninterrupted")
	tail := *want // what a run resumed at asyncMid compares with
	tail.losses = want.losses[asyncMid:]
	if want.scales != nil {
		tail.scales = want.scales[asyncMid:]
	}
	for _, dev := range devs {
		sync, async := t.TempDir(), t.TempDir()
		got, err := run(t, dev, parSeg{to: asyncSteps, save: sync, twin: async, mid: asyncMid})
		require.NoError(t, err, "%s: saving", devName(dev))
		same(t, want, got)
		n := requireSameTree(t, sync, async)
		resumed, err := run(t, dev, parSeg{from: asyncMid, to: asyncSteps, load: async})
		require.NoError(t, err, "%s: resume from the background save", devName(dev))
		same(t, &tail, resumed)
		t.Logf("%s: %d files identical; the runs saving and resumed match the uninterrupted one", devName(dev), n)
	}
}

// requireSameTree requires the trees under a and b to hold the same
// files, byte for byte, and returns how many.
func requireSameTree(t *testing.T, a, b string) int {
	t.Helper()
	read := func(root string) map[string][]byte {
		out := map[string][]byte{}
		require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			body, err := os.ReadFile(p)
			out[rel] = body
			return err
		}))
		return out
	}
	fa, fb := read(a), read(b)
	require.NotEmpty(t, fa, "no files under %s", a)
	var names []string
	for name := range fa {
		names = append(names, name)
	}
	for name := range fb {
		_, ok := fa[name]
		require.True(t, ok, "%s only in the background save", name)
	}
	for _, name := range names {
		got, ok := fb[name]
		require.True(t, ok, "%s missing from the background save", name)
		require.True(t, bytes.Equal(fa[name], got), "%s differs (%d and %d bytes)", name, len(fa[name]), len(got))
	}
	return len(names)
}

// TestSaveAsyncFailureOnEveryRank: a background save that fails on one
// rank (it saves under the tag the directory's latest names: rank 0
// refuses, in the background) is reported on every rank, by whichever of
// WaitSave, the next Save, SaveAsync or Load, and Close comes next; after
// it is reported, background saves work again. Both engines, under TP
// (TP rank 0 writes, the other TP ranks learn the outcome), on the CPU
// backend and the simulated device.
func TestSaveAsyncFailureOnEveryRank(t *testing.T) {
	cases := map[string]segmentRunner{
		"engine/" + (parDevCase{tp: 2, dp: 2, stage: 1}).String():                                parRunner(parDevCase{tp: 2, dp: 2, stage: 1}),
		"pipe/" + (pipeDevCase{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, tp: 2}).String(): pipeRunner(pipeDevCase{pp: 2, dp: 1, gas: 2, sched: "1F1B", virtual: 1, tp: 2}),
	}
	ops := []string{"WaitSave", "Save", "SaveAsync", "Load", "Close"}
	for name, run := range cases {
		for _, dev := range []string{"", "sim+delay"} {
			for _, op := range ops {
				t.Run(fmt.Sprintf("%s/%s/%s", name, devName(dev), op), func(t *testing.T) {
					requireAsyncFailureReported(t, run, dev, op)
				})
			}
		}
	}
}

// requireAsyncFailureReported runs one case of
// TestSaveAsyncFailureOnEveryRank.
func requireAsyncFailureReported(t *testing.T, run segmentRunner, dev, op string) {
	t.Helper()
	dir, other, again := t.TempDir(), t.TempDir(), t.TempDir()
	const why = `tag "t" is the latest checkpoint of`
	var mu sync.Mutex
	errs := map[int]error{}
	after := func(ctx context.Context, rank int, tr deepgo.Trainer) error {
		if err := tr.Save(ctx, dir, deepgo.SaveOptions{Tag: "t"}); err != nil {
			return err
		}
		if err := tr.SaveAsync(ctx, dir, deepgo.SaveOptions{Tag: "t"}); err != nil {
			return fmt.Errorf("rank %d: the failure surfaced at once: %w", rank, err)
		}
		var err error
		switch op {
		case "WaitSave":
			err = tr.WaitSave()
		case "Save":
			err = tr.Save(ctx, other, deepgo.SaveOptions{})
		case "SaveAsync":
			err = tr.SaveAsync(ctx, other, deepgo.SaveOptions{})
		case "Load":
			_, err = tr.Load(ctx, dir, deepgo.LoadOptions{})
		case "Close":
			err = tr.Close()
		}
		mu.Lock()
		errs[rank] = err
		mu.Unlock()
		if op == "Close" {
			return nil
		}
		// reported once: the engine saves in the background again
		if err := tr.SaveAsync(ctx, again, deepgo.SaveOptions{Tag: "again"}); err != nil {
			return fmt.Errorf("rank %d: SaveAsync after the failure was reported: %w", rank, err)
		}
		return tr.WaitSave()
	}
	seg := parSeg{to: 1, after: after}
	if op == "Close" {
		// Parameters after Close would fail: stop before them, once every
		// rank has closed (a rank's error aborts the world's groups, its
		// peers' background agreements included)
		var closed sync.WaitGroup
		closed.Add(4)
		seg.after = func(ctx context.Context, rank int, tr deepgo.Trainer) error {
			err := after(ctx, rank, tr)
			closed.Done()
			closed.Wait()
			return errors.Join(err, errStop)
		}
	}
	_, err := run(t, dev, seg)
	if op == "Close" {
		require.ErrorIs(t, err, errStop)
	} else {
		require.NoError(t, err)
	}
	require.Len(t, errs, 4, "every rank of the world reports")
	for rank, err := range errs {
		require.Error(t, err, "rank %d: %s after the failed background save", rank, op)
		assert.Contains(t, err.Error(), why, "rank %d: %s", rank, op)
		if rank == 1 {
			t.Logf("rank 1: %v", err)
		}
	}
	if op != "Close" {
		_, err := os.Stat(filepath.Join(again, "again", "manifest.json"))
		require.NoError(t, err, "the background save after the failure")
	}
	if op == "Save" || op == "SaveAsync" {
		entries, _ := os.ReadDir(other)
		for _, e := range entries {
			assert.False(t, strings.HasPrefix(e.Name(), "global_step"), "%s wrote %s after the failure was reported", op, e.Name())
		}
	}
}

// errStop ends a segment early on purpose.
var errStop = errors.New("stopped on purpose")
