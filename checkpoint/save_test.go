package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
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
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			m := ck.Manifest
			if ck.Tag != "global_step5" || m.Step != 5 || m.World != tc.world || m.ZeroStage != 2 {
				t.Fatalf("manifest: tag %s step %d world %d stage %d", ck.Tag, m.Step, m.World, m.ZeroStage)
			}
			// rank 0 has model+optim (+f64 in model group): 2 files; others 2 each.
			if got := len(ck.Files()); got != tc.files {
				t.Fatalf("%d data files, want %d: %v", got, tc.files, ck.Files())
			}
			if err := ck.Verify(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkMaster(t, ck, 5)
			cnt, err := ck.ReadTensor(context.Background(), "counters")
			if err != nil {
				t.Fatal(err)
			}
			defer cnt.Free()
			v, _ := cnt.Int64s()
			if !slices.Equal(v, []int64{5, -1 << 40, 7}) {
				t.Fatalf("counters = %v", v)
			}
			rng, ok := ck.Meta(tc.world-1, "rng")
			if !ok || string(rng) != `{"seed":`+strconv.Itoa((tc.world-1)*1000+5)+`}` {
				t.Fatalf("rng meta of last rank = %s", rng)
			}
		})
	}
}

func TestRotationKeepsNewest(t *testing.T) {
	dir := t.TempDir()
	for step := int64(1); step <= 5; step++ {
		saveWorld(t, dir, 2, step, Options{Keep: 2})
	}
	all, err := List(nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, i := range all {
		tags = append(tags, i.Tag)
	}
	if !slices.Equal(tags, []string{"global_step4", "global_step5"}) {
		t.Fatalf("after rotation: %v", tags)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("leftover %s", e.Name())
		}
	}
}

func TestOptionsFromConfig(t *testing.T) {
	k, n := 2, 5
	o := OptionsFromConfig(config.Checkpoint{SaveDir: "/x", CheckpointType: "blob", ZeroCheckpoint: false, KeepNMostRecent: &k, NumCheckpointsToKeep: &n})
	if o.Dir != "/x" || o.Type != TypeBlob || !o.Gathered || o.Keep != 5 {
		t.Fatalf("%+v", o)
	}
}

func TestSaveRefusesLatestTag(t *testing.T) {
	dir := t.TempDir()
	saveWorld(t, dir, 1, 3, Options{})
	st := synthState(t, 0, 1, 3)
	_, err := Save(context.Background(), Options{Dir: dir}, st)
	if err == nil || !strings.Contains(err.Error(), "latest") {
		t.Fatalf("saving over latest: %v", err)
	}
	ck, err := Open(nil, dir, "")
	if err != nil {
		t.Fatal(err)
	}
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
		if !errors.As(err, &tm) || !strings.Contains(err.Error(), `rank 2 has "global_step2"`) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "latest")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("latest written after a mismatch: %v", err)
	}
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
		if !errors.Is(err, comm.ErrTimeout) {
			t.Fatalf("save on 1 of 3 ranks: %v, want a timeout", err)
		}
		t.Log(err)
	case <-time.After(10 * time.Second):
		t.Fatal("save on a subset of ranks hangs")
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
		if !errors.As(err, &re) || len(re.Errs) != 1 || re.Errs[1] == "" {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if all, _ := List(nil, dir); len(all) != 0 {
		t.Fatalf("a failed save left %v", all)
	}
}
