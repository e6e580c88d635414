package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
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
		a, err := NewAsyncSaver(ctx, Options{Dir: dir, Comm: c, Keep: 2}, AsyncOptions{})
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
	a, err := NewAsyncSaver(ctx, Options{FS: vfs.WithFaults(vfs.OS, inj), Dir: dir}, AsyncOptions{})
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

// outcomeWorld lays 4 ranks out as 2 data-parallel groups × 2 "model"
// ranks each (model fastest, as TP is): rank r is data rank r/2 of the
// group of model rank r%2; model rank 0's group writes.
func outcomeWorld(ctx context.Context, c comm.Comm) (data, model comm.Comm, err error) {
	if data, err = c.Split(ctx, c.Rank()%2, c.Rank(), "data"); err != nil {
		return nil, nil, err
	}
	if model, err = c.Split(ctx, c.Rank()/2, c.Rank(), "model"); err != nil {
		data.Close()
		return nil, nil, err
	}
	return data, model, nil
}

// TestAsyncSaverOutcomeGroup: with an Outcome group, the ranks that write
// nothing (Skip) learn every background save's outcome: a save that
// succeeds leaves a checkpoint of the writing group and nil on every rank,
// one that fails on one writer fails at the next Save on every rank of
// the world, writers and skippers alike, naming the rank; Done closes
// when the save in flight is over, and is closed before any save.
func TestAsyncSaverOutcomeGroup(t *testing.T) {
	cs := newWorld(t, 4, 20*time.Second)
	dir := t.TempDir()
	errs := onAll(cs, func(r int, c comm.Comm) error {
		ctx := context.Background()
		data, model, err := outcomeWorld(ctx, c)
		if err != nil {
			return err
		}
		defer data.Close()
		defer model.Close()
		o := Options{Dir: dir, Comm: data}
		fault := &armedFault{OnOp: vfs.OnOp{Op: vfs.OpSync, Match: "*.safetensors", Err: syscall.EIO, Once: true}}
		if r == 2 { // data rank 1 of the writers: its second save fails
			o.FS = vfs.WithFaults(vfs.OS, fault)
		}
		a, err := NewAsyncSaver(ctx, o, AsyncOptions{Outcome: model, OutcomeName: "the model group", Skip: r%2 == 1})
		if err != nil {
			return err
		}
		defer a.Close()
		select {
		case <-a.Done():
		default:
			return fmt.Errorf("rank %d: Done is open before any save", r)
		}
		var st *State
		if r%2 == 0 {
			st = synthState(t, r/2, 2, 1)
			defer freeState(st)
		}
		if err := a.Save(ctx, "", st); err != nil {
			return fmt.Errorf("rank %d: first save: %w", r, err)
		}
		<-a.Done()
		if _, err := a.Wait(); err != nil {
			return fmt.Errorf("rank %d: first save: %w", r, err)
		}
		fault.armed.Store(true)
		if st != nil {
			st.Step = 2
		}
		if err := a.Save(ctx, "", st); err != nil {
			return fmt.Errorf("rank %d: second save failed at once: %w", r, err)
		}
		if st != nil {
			st.Step = 3
		}
		err = a.Save(ctx, "", st)
		switch {
		case err == nil:
			return fmt.Errorf("rank %d: the failed second save was not reported by the third", r)
		case !errors.Is(err, syscall.EIO) && r == 2:
			return fmt.Errorf("rank 2: want its own EIO, got %w", err)
		case !strings.Contains(err.Error(), "on rank 1") || !strings.Contains(err.Error(), "input/output error"):
			return fmt.Errorf("rank %d: the error does not name the failing writer and its error: %w", r, err)
		}
		t.Logf("rank %d: %v", r, err)
		return nil
	})
	mustAll(t, errs)
	ck, err := Open(nil, dir, "")
	require.NoError(t, err)
	defer ck.Close()
	require.Equal(t, "global_step1", ck.Tag, "latest: the failed save is not committed")
	checkMaster(t, ck, 1)
}

// armedFault injects its OnOp's fault once armed.
type armedFault struct {
	armed atomic.Bool
	vfs.OnOp
}

func (f *armedFault) Inject(op vfs.Op, path string, n int) (int, error) {
	if !f.armed.Load() {
		return 0, nil
	}
	return f.OnOp.Inject(op, path, n)
}

// NewAsyncSaver refuses Skip without an Outcome group, and MaxBytes with
// one.
func TestAsyncSaverOptionsRefused(t *testing.T) {
	ctx := context.Background()
	_, err := NewAsyncSaver(ctx, Options{Dir: t.TempDir()}, AsyncOptions{Skip: true})
	require.ErrorContains(t, err, "Skip needs an Outcome group")
	cs := newWorld(t, 1, time.Second)
	_, err = NewAsyncSaver(ctx, Options{Dir: t.TempDir()}, AsyncOptions{Outcome: cs[0], MaxBytes: 1})
	require.ErrorContains(t, err, "MaxBytes with an Outcome group: not supported")
}
