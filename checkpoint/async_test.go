package checkpoint

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/checkpoint/vfs"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

func TestAsyncSaverOverlapsAndSnapshots(t *testing.T) {
	cs := newWorld(t, 2, 20*time.Second)
	dir := t.TempDir()
	mustAll(t, onAll(cs, func(r int, c comm.Comm) error {
		ctx := context.Background()
		a, err := NewAsyncSaver(ctx, Options{Dir: dir, Comm: c, Keep: 2}, 0)
		if err != nil {
			return err
		}
		st := synthState(t, r, 2, 1)
		for step := int64(1); step <= 3; step++ {
			st.Step = step
			if err := a.Save(ctx, "", st); err != nil {
				return err
			}
			// Training goes on: scribble over the live tensors; the
			// snapshot must not see it.
			v, _ := st.Tensors[0].Data.Float32s()
			for i := range v {
				v[i] = -1
			}
			// The training group stays usable while the save runs.
			x, _ := tensor.FromFloat32([]float32{1})
			if err := c.AllReduce(ctx, x, comm.Sum); err != nil {
				return err
			}
			x.Free()
			// Next step's state.
			n := synthState(t, r, 2, step+1)
			copyTensor(st.Tensors[0].Data, n.Tensors[0].Data)
		}
		return a.Close()
	}))
	ck, err := Open(nil, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Tag != "global_step3" {
		t.Fatalf("latest = %s", ck.Tag)
	}
	checkMaster(t, ck, 3)
	if all, _ := List(nil, dir); len(all) != 2 {
		t.Fatalf("%d checkpoints kept, want 2", len(all))
	}
}

func TestAsyncSaverReportsFailureNextCall(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	inj := &vfs.OnOp{Op: vfs.OpSync, Match: "*.safetensors", Err: syscall.EIO, Once: true}
	a, err := NewAsyncSaver(ctx, Options{FS: vfs.WithFaults(vfs.OS, inj), Dir: dir}, 0)
	if err != nil {
		t.Fatal(err)
	}
	st := synthState(t, 0, 1, 1)
	if err := a.Save(ctx, "", st); err != nil {
		t.Fatalf("the failure must surface later, got %v", err)
	}
	st.Step = 2
	if err := a.Save(ctx, "", st); !errors.Is(err, syscall.EIO) {
		t.Fatalf("next Save: %v, want the previous EIO", err)
	}
	if err := a.Save(ctx, "", st); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if tag, _ := ReadLatest(nil, dir); tag != "global_step2" {
		t.Fatalf("latest = %q", tag)
	}
}
