package local

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// rankComm is one rank's handle on a group.
type rankComm struct {
	g    *group
	rank int
	cpu  *backend.CPU

	mu      sync.Mutex
	seq     uint64
	sendSeq []uint64 // next Send sequence number per peer
	recvSeq []uint64 // next Recv sequence number per peer
	closed  bool
}

var _ comm.Comm = (*rankComm)(nil)

func newRankComm(g *group, rank int) *rankComm {
	return &rankComm{g: g, rank: rank, cpu: g.cpus[rank],
		sendSeq: make([]uint64, g.size()), recvSeq: make([]uint64, g.size())}
}

func (c *rankComm) Rank() int      { return c.rank }
func (c *rankComm) Size() int      { return c.g.size() }
func (c *rankComm) Name() string   { return c.g.name }
func (c *rankComm) Members() []int { return append([]int(nil), c.g.members...) }

func (c *rankComm) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

// work is one operation in flight; it implements comm.Work.
type work struct {
	c       *rankComm
	call    comm.Call
	ctx     context.Context // the caller's, under the group's timeout
	caller  context.Context // the caller's own
	cancel  context.CancelFunc
	started time.Time
	s       *slot
	pos     int
	err     error
	done    chan struct{}
}

func (w *work) Done() <-chan struct{} { return w.done }

func (w *work) Wait(ctx context.Context) error {
	return comm.WaitDone(ctx, w.done, func() error { return w.err }, w.call.Op, w.c.g.name, w.c.rank)
}

func (c *rankComm) errorf(op comm.OpKind, ranks []int, err error) *comm.Error {
	return &comm.Error{Op: op.String(), Group: c.g.name, Rank: c.rank, Ranks: ranks, Err: err}
}

func (w *work) finish(f *failure) {
	if f != nil {
		w.err = w.c.errorf(w.call.Op, f.ranks, f.err)
	}
	if w.cancel != nil {
		w.cancel()
	}
	close(w.done)
}

// begin validates (argErr from the caller's checks), takes the call's
// sequence number and posts it. A returned work with done closed has
// failed already; otherwise run finishes it.
func (c *rankComm) begin(ctx context.Context, call comm.Call, argErr error, in, out *tensor.Tensor, sp splitArg) *work {
	w := &work{c: c, call: call, started: time.Now(), done: make(chan struct{})}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		w.finish(&failure{err: fmt.Errorf("%w: this rank's handle was closed", comm.ErrClosed)})
		return w
	}
	key := slotKey{seq: c.seq}
	parties, pos := []int(nil), c.rank
	switch {
	case argErr != nil:
	case call.Op == comm.OpSend:
		key = slotKey{p2p: true, src: c.rank, dst: call.Root, seq: c.sendSeq[call.Root]}
		c.sendSeq[call.Root]++
		parties, pos = []int{c.rank, call.Root}, 0
	case call.Op == comm.OpRecv:
		key = slotKey{p2p: true, src: call.Root, dst: c.rank, seq: c.recvSeq[call.Root]}
		c.recvSeq[call.Root]++
		parties, pos = []int{call.Root, c.rank}, 1
	default:
		c.seq++
		parties = c.g.identity()
	}
	c.mu.Unlock()

	if argErr != nil {
		c.g.breakWith(&failure{ranks: []int{c.rank}, err: fmt.Errorf("%w: rank %d: %s: %w", comm.ErrAborted, c.rank, call.Op, argErr)})
		w.finish(&failure{err: argErr})
		return w
	}
	w.caller = ctx
	w.ctx, w.cancel = context.WithTimeout(ctx, c.g.timeout)
	s, f := c.g.post(key, parties, pos, call, in, out, sp)
	if f != nil {
		w.finish(f)
		return w
	}
	w.s, w.pos = s, pos
	return w
}

// run waits for the rendezvous, then does this rank's share of the data
// movement.
func (w *work) run() {
	select {
	case <-w.done:
		return
	default:
	}
	if f := w.c.g.await(w.ctx, w.caller, w.s, w.pos, w.started); f != nil {
		w.finish(f)
		return
	}
	w.c.execute(w.s, w.pos)
	var f *failure
	if w.s.dataErr != nil {
		f = &failure{err: w.s.dataErr}
	}
	w.finish(f)
}

func (c *rankComm) sync(w *work) error {
	w.run()
	return w.err
}

func (c *rankComm) async(w *work) comm.Work {
	go w.run()
	return w
}

func (g *group) identity() []int {
	p := make([]int, g.size())
	for i := range p {
		p[i] = i
	}
	return p
}

// ---- argument checks --------------------------------------------------------

func (c *rankComm) checkRoot(what string, r int) error {
	if r < 0 || r >= c.Size() {
		return fmt.Errorf("%w: %s %d out of range [0, %d)", comm.ErrInvalid, what, r, c.Size())
	}
	return nil
}

// chunkOf reports whether part is exactly chunk i (of size part) of whole.
func chunkOf(part, whole *tensor.Tensor, i int) bool {
	return part.DType() == whole.DType() &&
		uintptr(part.Ptr()) == uintptr(unsafe.Add(whole.Ptr(), i*part.Bytes()))
}

func (c *rankComm) allReduceArgs(t *tensor.Tensor, op comm.ReduceOp) (comm.Call, error) {
	call := comm.Call{Op: comm.OpAllReduce, Red: op}
	if err := comm.CheckHost("t", t); err != nil {
		return call, err
	}
	call.DType, call.Count = t.DType(), t.Numel()
	return call, comm.CheckReduce(t.DType(), op)
}

// scatterArgs checks the (small, big) pair of ReduceScatter and AllGather:
// big has Size()*small elements and may overlap small only as its chunk Rank().
func (c *rankComm) scatterArgs(op comm.OpKind, small, big *tensor.Tensor, smallName, bigName string) (comm.Call, error) {
	call := comm.Call{Op: op}
	if err := comm.CheckHost(smallName, small); err != nil {
		return call, err
	}
	if err := comm.CheckHost(bigName, big); err != nil {
		return call, err
	}
	call.DType, call.Count = small.DType(), small.Numel()
	switch {
	case small.DType() != big.DType():
		return call, fmt.Errorf("%w: %s is %v, %s is %v: dtypes must agree", comm.ErrInvalid, bigName, big.DType(), smallName, small.DType())
	case big.Numel() != c.Size()*small.Numel():
		return call, fmt.Errorf("%w: %s has %d elements, want %d (group size %d x %s's %d)", comm.ErrInvalid,
			bigName, big.Numel(), c.Size()*small.Numel(), c.Size(), smallName, small.Numel())
	case comm.Overlap(small, big) && !chunkOf(small, big, c.rank):
		return call, fmt.Errorf("%w: %s overlaps %s other than as its chunk %d", comm.ErrInvalid, smallName, bigName, c.rank)
	}
	return call, nil
}

// ---- operations -------------------------------------------------------------

func (c *rankComm) allReduce(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) *work {
	call, err := c.allReduceArgs(t, op)
	return c.begin(ctx, call, err, t, t, splitArg{})
}

func (c *rankComm) AllReduce(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) error {
	return c.sync(c.allReduce(ctx, t, op))
}

func (c *rankComm) AllReduceAsync(ctx context.Context, t *tensor.Tensor, op comm.ReduceOp) comm.Work {
	return c.async(c.allReduce(ctx, t, op))
}

func (c *rankComm) reduceScatter(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) *work {
	call, err := c.scatterArgs(comm.OpReduceScatter, dst, src, "dst", "src")
	call.Red = op
	if err == nil {
		err = comm.CheckReduce(call.DType, op)
	}
	return c.begin(ctx, call, err, src, dst, splitArg{})
}

func (c *rankComm) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) error {
	return c.sync(c.reduceScatter(ctx, dst, src, op))
}

func (c *rankComm) ReduceScatterAsync(ctx context.Context, dst, src *tensor.Tensor, op comm.ReduceOp) comm.Work {
	return c.async(c.reduceScatter(ctx, dst, src, op))
}

func (c *rankComm) allGather(ctx context.Context, dst, src *tensor.Tensor) *work {
	call, err := c.scatterArgs(comm.OpAllGather, src, dst, "src", "dst")
	return c.begin(ctx, call, err, src, dst, splitArg{})
}

func (c *rankComm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	return c.sync(c.allGather(ctx, dst, src))
}

func (c *rankComm) AllGatherAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.async(c.allGather(ctx, dst, src))
}

func (c *rankComm) broadcast(ctx context.Context, t *tensor.Tensor, root int) *work {
	call := comm.Call{Op: comm.OpBroadcast, Root: root}
	err := comm.CheckHost("t", t)
	if err == nil {
		call.DType, call.Count = t.DType(), t.Numel()
		err = c.checkRoot("root", root)
	}
	return c.begin(ctx, call, err, t, t, splitArg{})
}

func (c *rankComm) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	return c.sync(c.broadcast(ctx, t, root))
}

func (c *rankComm) BroadcastAsync(ctx context.Context, t *tensor.Tensor, root int) comm.Work {
	return c.async(c.broadcast(ctx, t, root))
}

func (c *rankComm) reduce(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) *work {
	call, err := c.allReduceArgs(t, op)
	call.Op, call.Root = comm.OpReduce, root
	if err == nil {
		err = c.checkRoot("root", root)
	}
	return c.begin(ctx, call, err, t, t, splitArg{})
}

func (c *rankComm) Reduce(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) error {
	return c.sync(c.reduce(ctx, t, root, op))
}

func (c *rankComm) ReduceAsync(ctx context.Context, t *tensor.Tensor, root int, op comm.ReduceOp) comm.Work {
	return c.async(c.reduce(ctx, t, root, op))
}

func (c *rankComm) p2p(ctx context.Context, op comm.OpKind, t *tensor.Tensor, peer int) *work {
	call := comm.Call{Op: op, Root: peer}
	err := comm.CheckHost("t", t)
	if err == nil {
		call.DType, call.Count = t.DType(), t.Numel()
		err = c.checkRoot("peer", peer)
	}
	if err == nil && peer == c.rank {
		err = fmt.Errorf("%w: peer %d is this rank", comm.ErrInvalid, peer)
	}
	return c.begin(ctx, call, err, t, t, splitArg{})
}

func (c *rankComm) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.sync(c.p2p(ctx, comm.OpSend, t, peer))
}

func (c *rankComm) SendAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.async(c.p2p(ctx, comm.OpSend, t, peer))
}

func (c *rankComm) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.sync(c.p2p(ctx, comm.OpRecv, t, peer))
}

func (c *rankComm) RecvAsync(ctx context.Context, t *tensor.Tensor, peer int) comm.Work {
	return c.async(c.p2p(ctx, comm.OpRecv, t, peer))
}

func (c *rankComm) allToAll(ctx context.Context, dst, src *tensor.Tensor) *work {
	call := comm.Call{Op: comm.OpAllToAll}
	err := comm.CheckHost("src", src)
	if err == nil {
		err = comm.CheckHost("dst", dst)
	}
	if err == nil {
		call.DType, call.Count = src.DType(), src.Numel()/c.Size()
		switch {
		case dst.DType() != src.DType():
			err = fmt.Errorf("%w: dst is %v, src is %v: dtypes must agree", comm.ErrInvalid, dst.DType(), src.DType())
		case dst.Numel() != src.Numel() || src.Numel()%c.Size() != 0:
			err = fmt.Errorf("%w: src has %d and dst %d elements: want equal multiples of the group size %d",
				comm.ErrInvalid, src.Numel(), dst.Numel(), c.Size())
		case comm.Overlap(dst, src):
			err = fmt.Errorf("%w: dst overlaps src", comm.ErrInvalid)
		}
	}
	return c.begin(ctx, call, err, src, dst, splitArg{})
}

func (c *rankComm) AllToAll(ctx context.Context, dst, src *tensor.Tensor) error {
	return c.sync(c.allToAll(ctx, dst, src))
}

func (c *rankComm) AllToAllAsync(ctx context.Context, dst, src *tensor.Tensor) comm.Work {
	return c.async(c.allToAll(ctx, dst, src))
}

func (c *rankComm) Barrier(ctx context.Context) error {
	return c.sync(c.begin(ctx, comm.Call{Op: comm.OpBarrier}, nil, nil, nil, splitArg{}))
}

func (c *rankComm) BarrierAsync(ctx context.Context) comm.Work {
	return c.async(c.begin(ctx, comm.Call{Op: comm.OpBarrier}, nil, nil, nil, splitArg{}))
}

func (c *rankComm) Split(ctx context.Context, color, key int, name string) (comm.Comm, error) {
	var err error
	if color < comm.NoColor {
		err = fmt.Errorf("%w: color %d: want >= 0 or NoColor", comm.ErrInvalid, color)
	}
	w := c.begin(ctx, comm.Call{Op: comm.OpSplit}, err, nil, nil, splitArg{color: color, key: key, name: name})
	if err := c.sync(w); err != nil {
		return nil, err
	}
	out := w.s.splitRes[w.pos]
	if out.g == nil {
		return nil, nil
	}
	return newRankComm(out.g, out.rank), nil
}
