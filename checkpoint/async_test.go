package checkpoint

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/checkpoint/vfs"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
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
	require.NoError(t, err)
	defer ck.Close()
	require.Equal(t, "global_step3", ck.Tag, "latest")
	checkMaster(t, ck, 3)
	all, _ := List(nil, dir)
	require.Len(t, all, 2, "checkpoints kept")
}

func TestAsyncSaverReportsFailureNextCall(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	inj := &vfs.OnOp{Op: vfs.OpSync, Match: "*.safetensors", Err: syscall.EIO, Once: true}
	a, err := NewAsyncSaver(ctx, Options{FS: vfs.WithFaults(vfs.OS, inj), Dir: dir}, 0)
	require.NoError(t, err)
	st := synthState(t, 0, 1, 1)
	require.NoError(t, a.Save(ctx, "", st), "the failure must surface later, got")
	st.Step = 2
	require.ErrorIs(t, a.Save(ctx, "", st), syscall.EIO, "next Save: want the previous EIO")
	require.NoError(t, a.Save(ctx, "", st))
	require.NoError(t, a.Close())
	tag, _ := ReadLatest(nil, dir)
	require.Equal(t, "global_step2", tag, "latest")
}
