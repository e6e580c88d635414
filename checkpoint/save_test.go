package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		world int
		o     Options
		files int // data files in the checkpoint
	}{
		{"world1-sharded", 1, Options{}, 2},
		{"world3-sharded", 3, Options{Type: TypeSharded}, 2*3 + 0},
		{"world3-blob", 3, Options{Type: TypeBlob}, 3},
		{"world4-gathered", 4, Options{Gathered: true}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			saveWorld(t, dir, tc.world, 5, tc.o)
			ck, err := Open(nil, dir, "")
			require.NoError(t, err)
			defer ck.Close()
			m := ck.Manifest
			require.Equal(t, "global_step5", ck.Tag, "manifest tag")
			require.EqualValues(t, 5, m.Step, "manifest step")
			require.EqualValues(t, tc.world, m.World, "manifest world")
			require.EqualValues(t, 2, m.ZeroStage, "manifest stage")
			// rank 0 has model+optim (+f64 in model group): 2 files; others 2 each.
			require.Len(t, ck.Files(), tc.files, "data files")
			require.NoError(t, ck.Verify(context.Background()))
			checkMaster(t, ck, 5)
			cnt, err := ck.ReadTensor(context.Background(), "counters")
			require.NoError(t, err)
			defer cnt.Free()
			v, _ := cnt.Int64s()
			require.Equal(t, []int64{5, -1 << 40, 7}, v, "counters")
			rng, ok := ck.Meta(tc.world-1, "rng")
			require.True(t, ok, "rng meta of last rank missing")
			require.Equal(t, `{"seed":`+strconv.Itoa((tc.world-1)*1000+5)+`}`, string(rng), "rng meta of last rank")
		})
	}
}

func TestRotationKeepsNewest(t *testing.T) {
	dir := t.TempDir()
	for step := int64(1); step <= 5; step++ {
		saveWorld(t, dir, 2, step, Options{Keep: 2})
	}
	all, err := List(nil, dir)
	require.NoError(t, err)
	var tags []string
	for _, i := range all {
		tags = append(tags, i.Tag)
	}
	require.Equal(t, []string{"global_step4", "global_step5"}, tags, "after rotation")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		assert.False(t, strings.HasPrefix(e.Name(), "."), "leftover %s", e.Name())
	}
}

func TestOptionsFromConfig(t *testing.T) {
	k, n := 2, 5
	o := OptionsFromConfig(config.Checkpoint{SaveDir: "/x", CheckpointType: "blob", ZeroCheckpoint: false, KeepNMostRecent: &k, NumCheckpointsToKeep: &n})
	require.Equal(t, "/x", o.Dir, "%+v", o)
	require.Equal(t, TypeBlob, o.Type, "%+v", o)
	require.True(t, o.Gathered, "%+v", o)
	require.Equal(t, 5, o.Keep, "%+v", o)
}

func TestSaveRefusesLatestTag(t *testing.T) {
	dir := t.TempDir()
	saveWorld(t, dir, 1, 3, Options{})
	st := synthState(t, 0, 1, 3)
	_, err := Save(context.Background(), Options{Dir: dir}, st)
	require.ErrorContains(t, err, "latest", "saving over latest")
	ck, err := Open(nil, dir, "")
	require.NoError(t, err)
	defer ck.Close()
	checkMaster(t, ck, 3)
}

func TestSaveTagMismatch(t *testing.T) {
	cs := newWorld(t, 3, 10*time.Second)
	dir := t.TempDir()
	errs := onAll(cs, func(r int, c comm.Comm) error {
		st := synthState(t, r, 3, int64(1+r/2)) // rank 2 is a step ahead
		_, err := Save(context.Background(), Options{Dir: dir, Comm: c}, st)
		return err
	})
	for r, err := range errs {
		var tm *comm.MismatchError
		require.ErrorAs(t, err, &tm, "rank %d", r)
		require.ErrorContains(t, err, `rank 2 has "global_step2"`, "rank %d", r)
	}
	_, err := os.Stat(filepath.Join(dir, "latest"))
	require.ErrorIs(t, err, os.ErrNotExist, "latest written after a mismatch")
}

func TestSaveOnSubsetErrors(t *testing.T) {
	cs := newWorld(t, 3, 300*time.Millisecond)
	dir := t.TempDir()
	st := synthState(t, 0, 3, 1)
	done := make(chan error, 1)
	go func() {
		_, err := Save(context.Background(), Options{Dir: dir, Comm: cs[0]}, st)
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, comm.ErrTimeout, "save on 1 of 3 ranks: want a timeout")
		t.Log(err)
	case <-time.After(10 * time.Second):
		require.Fail(t, "save on a subset of ranks hangs")
	}
}

func TestSaveFailureOnOneRankFailsAll(t *testing.T) {
	cs := newWorld(t, 3, 10*time.Second)
	dir := t.TempDir()
	errs := onAll(cs, func(r int, c comm.Comm) error {
		st := synthState(t, r, 3, 1)
		if r == 1 {
			st.Tensors[0].Name = "" // invalid on rank 1 only
		}
		_, err := Save(context.Background(), Options{Dir: dir, Comm: c}, st)
		return err
	})
	for r, err := range errs {
		var re *comm.RankError
		require.ErrorAs(t, err, &re, "rank %d", r)
		require.Len(t, re.Errs, 1, "rank %d: %v", r, err)
		require.NotEmpty(t, re.Errs[1], "rank %d: %v", r, err)
	}
	all, _ := List(nil, dir)
	require.Empty(t, all, "a failed save left checkpoints")
}

// Open given one checkpoint's folder where its save directory belongs says
// so, naming the save directory and the tag to pass.
func TestOpenTagFolderHint(t *testing.T) {
	dir := t.TempDir()
	saveWorld(t, dir, 1, 5, Options{})
	_, err := Open(nil, filepath.Join(dir, "global_step5"), "")
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, "is one checkpoint's folder, with a manifest.json: load from its save directory "+dir+` with tag "global_step5"`)
	_, err = Open(nil, t.TempDir(), "") // an empty folder: no hint
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.NotContains(t, err.Error(), "checkpoint's folder")
}
