package commslog

import (
	"context"
	"sync"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Wrap returns c recording into l (nil for a nil c). The result also has
// c's Backend (nil if c has none) and, when c has one, its Device, which
// is how an engine tells what memory a comm moves.
func (l *Logger) Wrap(c comm.Comm) comm.Comm {
	if c == nil {
		return nil
	}
	w := &logged{inner: c, l: l}
	if _, ok := c.(interface{ Device() tensor.Device }); ok {
		return &loggedDevice{w}
	}
	return w
}

// logged is a comm.Comm recording into l.
type logged struct {
	inner comm.Comm
	l     *Logger
}

// loggedDevice is a logged device communicator (NCCL).
type loggedDevice struct{ *logged }

// Device is the wrapped comm's device.
func (c *loggedDevice) Device() tensor.Device {
	return c.inner.(interface{ Device() tensor.Device }).Device()
}

// Unwrap returns the wrapped comm.
func (c *logged) Unwrap() comm.Comm { return c.inner }

// Backend is the wrapped comm's Backend, nil when it has none.
func (c *logged) Backend() backend.Backend {
	if bc, ok := c.inner.(interface{ Backend() backend.Backend }); ok {
		return bc.Backend()
	}
	return nil
}

// nbytes is a tensor's size, 0 for nil (the wrapped comm reports it).
func nbytes(t *tensor.Tensor) int64 {
	if t == nil {
		return 0
	}
	return int64(t.Bytes())
}

// call is one operation in flight: what to record when it ends well.
type call struct {
	c     *logged
	op    comm.OpKind
	name  string
	bytes int64
	start time.Time
}

// begin starts the clock of op unless the logger skips it (nil); the
// caller is two frames up (the wrapper method's caller). The methods call
// it as the receiver of end or async, which Go evaluates before their
// argument, the wrapped call.
func (c *logged) begin(op comm.OpKind, bytes int64) *call {
	if !c.l.on[op] {
		return nil
	}
	return &call{c: c, op: op, name: c.l.recordName(op, 2), bytes: bytes, start: c.l.opts.Now()}
}

func (k *call) end(err error) error {
	if k != nil && err == nil {
		k.c.l.record(k.c.inner, k.op, k.name, k.bytes, k.c.l.opts.Now().Sub(k.start))
	}
	return err
}

// async wraps the Work of k, whose clock stops at the first Wait that
// finds the operation over.
func (k *call) async(w comm.Work) comm.Work {
	if k == nil {
		return w
	}
	return &work{Work: w, k: k}
}

type work struct {
	comm.Work
	k    *call
	once sync.Once
}

// Wait is the wrapped Work's; the first call that returns with the
// operation over records it.
func (w *work) Wait(ctx context.Context) error {
	err := w.Work.Wait(ctx)
	select {
	case <-w.Work.Done():
		w.once.Do(func() {
			// the operation's own outcome, not a context error of this
			// Wait that raced with its end
			_ = w.k.end(w.Work.Wait(context.Background()))
		})
	default:
	}
	return err
}

// The comm.Comm methods below are the wrapped comm's, timed where they move data.

func (c *logged) Rank() int      { return c.inner.Rank() }
func (c *logged) Size() int      { return c.inner.Size() }
func (c *logged) Name() string   { return c.inner.Name() }
func (c *logged) Members() []int { return c.inner.Members() }
func (c *logged) Close() error   { return c.inner.Close() }
func (c *logged) String() string { return "commslog(" + c.inner.Name() + ")" }

func (c *logged) AllReduce(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) error {
	return c.begin(comm.OpAllReduce, nbytes(t)).end(c.inner.AllReduce(ctx, t, op))
}

func (c *logged) AllReduceAsync(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) comm.Work {
	return c.begin(comm.OpAllReduce, nbytes(t)).async(c.inner.AllReduceAsync(ctx, t, op))
}

func (c *logged) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) error {
	return c.begin(comm.OpReduceScatter, nbytes(src)).end(c.inner.ReduceScatter(ctx, dst, src, op))
}

func (c *logged) ReduceScatterAsync(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) comm.Work {
	return c.begin(comm.OpReduceScatter, nbytes(src)).async(c.inner.ReduceScatterAsync(ctx, dst, src, op))
}

func (c *logged) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	return c.begin(comm.OpAllGather, nbytes(dst)).end(c.inner.AllGather(ctx, dst, src))
}

func (c *logged) AllGatherAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.begin(comm.OpAllGather, nbytes(dst)).async(c.inner.AllGatherAsync(ctx, dst, src))
}

func (c *logged) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	return c.begin(comm.OpBroadcast, nbytes(t)).end(c.inner.Broadcast(ctx, t, root))
}

func (c *logged) BroadcastAsync(ctx context.Context, t *tensor.Tensor, root int) comm.Work {
	return c.begin(comm.OpBroadcast, nbytes(t)).async(c.inner.BroadcastAsync(ctx, t, root))
}

func (c *logged) Reduce(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) error {
	return c.begin(comm.OpReduce, nbytes(t)).end(c.inner.Reduce(ctx, t, root, op))
}

func (c *logged) ReduceAsync(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) comm.Work {
	return c.begin(comm.OpReduce, nbytes(t)).async(c.inner.ReduceAsync(ctx, t, root, op))
}

func (c *logged) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.begin(comm.OpSend, nbytes(t)).end(c.inner.Send(ctx, t, peer))
}

func (c *logged) SendAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.begin(comm.OpSend, nbytes(t)).async(c.inner.SendAsync(ctx, t, peer))
}

func (c *logged) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.begin(comm.OpRecv, nbytes(t)).end(c.inner.Recv(ctx, t, peer))
}

func (c *logged) RecvAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.begin(comm.OpRecv, nbytes(t)).async(c.inner.RecvAsync(ctx, t, peer))
}

func (c *logged) AllToAll(ctx context.Context, dst, src *tensor.Tensor) error {
	return c.begin(comm.OpAllToAll, nbytes(src)).end(c.inner.AllToAll(ctx, dst, src))
}

func (c *logged) AllToAllAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.begin(comm.OpAllToAll, nbytes(src)).async(c.inner.AllToAllAsync(ctx, dst, src))
}

func (c *logged) Barrier(ctx context.Context) error {
	return c.begin(comm.OpBarrier, 0).end(c.inner.Barrier(ctx))
}

func (c *logged) BarrierAsync(ctx context.Context) comm.Work {
	return c.begin(comm.OpBarrier, 0).async(c.inner.BarrierAsync(ctx))
}

// Split is the wrapped comm's, its new group wrapped into the same Logger
// (a rank passing comm.NoColor still gets a nil Comm).
func (c *logged) Split(ctx context.Context, color, key int, name string) (comm.Comm, error) {
	s, err := c.inner.Split(ctx, color, key, name)
	if err != nil || s == nil {
		return s, err
	}
	return c.l.Wrap(s), nil
}
