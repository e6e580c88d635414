//go:build gloo

package gloo

/*
#include "gloo_shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/cgo"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// world is what a group and the groups split from it share.
type world struct {
	dev     *device
	store   *comm.Store
	cpu     *backend.CPU
	timeout time.Duration
	// storeHost is the world rank serving the store (-1: unknown), named
	// when the store fails in a post-mortem.
	storeHost int

	mu   sync.Mutex
	refs int // open groups on dev
}

func (w *world) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refs--; w.refs == 0 {
		C.dg_gloo_device_free(w.dev.p)
	}
}

// glooComm is one rank's handle on a Gloo context.
type glooComm struct {
	w       *world
	ctx     unsafe.Pointer // the shim's context
	prefix  string         // the group's store namespace
	rank    int
	size    int
	name    string
	members []int

	mu      sync.Mutex
	seq     uint64        // collectives issued
	last    chan struct{} // closed when the previous collective is over
	sendSeq map[int]uint64
	recvSeq map[int]uint64
	broken  error
	closed  bool
}

var _ comm.Comm = (*glooComm)(nil)

// NewFromStore joins rank of a size-rank Gloo group whose ranks meet
// through store: each rank opens Gloo's TCP transport (opts.Hostname or
// opts.Iface), publishes its address under the group's keys and connects
// to every other rank, under min(ctx's deadline, opts.Timeout). Every
// rank of the group calls it with the same store and size.
func NewFromStore(ctx context.Context, store *comm.Store, rank, size int, opts Options) (comm.Comm, error) {
	return newFromStore(ctx, store, rank, size, opts, -1)
}

// newFromStore is NewFromStore knowing which world rank serves the store
// (-1: none of them, or unknown).
func newFromStore(ctx context.Context, store *comm.Store, rank, size int, opts Options, storeHost int) (comm.Comm, error) {
	fail := func(err error) error { return &comm.Error{Op: "Init", Group: "world", Rank: rank, Err: err} }
	if size < 1 || rank < 0 || rank >= size {
		return nil, fail(fmt.Errorf("%w: rank %d of size %d: want 0 <= rank < size", comm.ErrInvalid, rank, size))
	}
	if store == nil {
		return nil, fail(fmt.Errorf("%w: store is nil", comm.ErrInvalid))
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		d, err := comm.DefaultTimeout()
		if err != nil {
			return nil, fail(fmt.Errorf("%w: %w", comm.ErrInvalid, err))
		}
		timeout = d
	}
	if opts.Threads < 0 {
		return nil, fail(fmt.Errorf("%w: Options.Threads %d: want >= 0", comm.ErrInvalid, opts.Threads))
	}
	cpu, err := backend.NewCPU(opts.Threads)
	if err != nil {
		return nil, fail(err)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A store may see several worlds (a restart, a second job step): the
	// n-th rank to arrive belongs to world (n-1)/size.
	n, err := store.Add(dctx, "gloo/joined", 1)
	if err != nil {
		return nil, fail(fmt.Errorf("%w: rendezvous store: %w", comm.ErrAborted, err))
	}
	if opts.Iface == "" && opts.Hostname == "" {
		opts.Iface = os.Getenv("GLOO_SOCKET_IFNAME")
	}
	dev, err := openDevice(opts)
	if err != nil {
		return nil, fail(fmt.Errorf("%w: %w", comm.ErrInvalid, err))
	}
	w := &world{dev: dev, store: store, cpu: cpu, timeout: timeout, storeHost: storeHost, refs: 1}
	members := make([]int, size)
	for i := range members {
		members[i] = i
	}
	c, err := w.connect(dctx, fmt.Sprintf("gloo/%d", (n-1)/int64(size)), "world", rank, members)
	w.release() // the group holds its own reference
	if err != nil {
		return nil, fail(err)
	}
	return c, nil
}

// connect builds the full mesh of one group (rank of len(members)).
func (w *world) connect(ctx context.Context, prefix, name string, rank int, members []int) (*glooComm, error) {
	size := len(members)
	h := cgo.NewHandle(&storeView{ctx: ctx, store: w.store, prefix: prefix})
	defer h.Delete()
	var p unsafe.Pointer
	left := w.timeout
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	if f := shim(func(e *C.char, n C.size_t) C.int {
		return C.dg_gloo_connect(w.dev.p, C.uintptr_t(h), C.int(rank), C.int(size), millis(left), &p, e, n)
	}); f != nil {
		return nil, fmt.Errorf("%w: connecting rank %d of %d (store keys %s/*): %w", f.sentinel(), rank, size, prefix, f)
	}
	// Gloo's per-operation deadline defaults to the group's timeout; every
	// call passes its own, shorter when the caller's context says so.
	w.mu.Lock()
	w.refs++
	w.mu.Unlock()
	done := make(chan struct{})
	close(done)
	return &glooComm{w: w, ctx: p, prefix: prefix, rank: rank, size: size, name: name, members: members,
		last: done, sendSeq: map[int]uint64{}, recvSeq: map[int]uint64{}}, nil
}

func (c *glooComm) Rank() int      { return c.rank }
func (c *glooComm) Size() int      { return c.size }
func (c *glooComm) Name() string   { return c.name }
func (c *glooComm) Members() []int { return append([]int(nil), c.members...) }

// Close frees the Gloo context: its connections close, so peers still
// using the group see this rank fail.
func (c *glooComm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	C.dg_gloo_free(c.ctx)
	c.w.release()
	return nil
}

// ---- descriptors ------------------------------------------------------------

// A descriptor is the call plus whether this rank's arguments were bad,
// and Split's color and key.
const descLen = 8

// Slot prefixes of the shim's own messages, above Gloo's (0x01..0x08).
const (
	slotDesc     = 0x70 << 56 // collective descriptors, by sequence number
	slotP2PDesc  = 0x71 << 56 // Send/Recv descriptors, by direction and count
	slotP2PData  = 0x72 << 56
	p2pDirection = 1 << 48
)

type desc struct {
	call       comm.Call
	failed     bool
	color, key int
}

func (d desc) encode() [descLen]int64 {
	f := int64(0)
	if d.failed {
		f = 1
	}
	c := d.call
	return [descLen]int64{int64(c.Op), int64(c.DType), int64(c.Count), int64(c.Red), int64(c.Root), f, int64(d.color), int64(d.key)}
}

func decode(v []int64) desc {
	return desc{call: comm.Call{Op: comm.OpKind(v[0]), DType: tensor.DType(v[1]), Count: int(v[2]), Red: comm.ReduceOp(v[3]), Root: int(v[4])},
		failed: v[5] != 0, color: int(v[6]), key: int(v[7])}
}

// ---- operation driver -------------------------------------------------------

// op is one call in flight; it implements comm.Work.
type op struct {
	c      *glooComm
	me     desc
	ctx    context.Context
	cancel context.CancelFunc
	// callerBinds: the caller's context deadline, not the group's timeout,
	// bounds ctx (comm.CallerBinds)
	callerBinds bool
	peers       []int  // the ranks the descriptor goes to
	slot        uint64 // of the descriptor exchange
	id          string // names the call in the store's post-mortem keys
	tag         uint32 // of Gloo's collective
	prev        chan struct{}
	all         map[int]desc // every rank's descriptor, after the exchange
	err         error
	done        chan struct{}
}

func (o *op) Done() <-chan struct{} { return o.done }

func (o *op) Wait(ctx context.Context) error {
	return comm.WaitDone(ctx, o.done, func() error { return o.err }, o.me.call.Op, o.c.name, o.c.rank)
}

func (c *glooComm) errorf(k comm.OpKind, ranks []int, err error) *comm.Error {
	return &comm.Error{Op: k.String(), Group: c.name, Rank: c.rank, Ranks: ranks, Err: err}
}

// start numbers the call (collectives in call order, Send and Recv per
// peer) and starts its clock; exec then runs it.
func (c *glooComm) start(ctx context.Context, me desc, argErr error) *op {
	o := &op{c: c, me: me, done: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := me.call.Op
	switch {
	case c.closed:
		o.err = c.errorf(k, nil, fmt.Errorf("%w: handle closed", comm.ErrClosed))
	case c.broken != nil:
		o.err = c.errorf(k, nil, fmt.Errorf("%w: group broken by an earlier failure: %w", comm.ErrAborted, c.broken))
	}
	if o.err != nil {
		close(o.done)
		return o
	}
	o.callerBinds = comm.CallerBinds(ctx, c.w.timeout)
	o.ctx, o.cancel = context.WithTimeout(ctx, c.w.timeout)
	if k == comm.OpSend || k == comm.OpRecv {
		peer := me.call.Root
		if peer >= 0 && peer < c.size && peer != c.rank {
			sender, recver := c.rank, peer
			seq := c.sendSeq
			if k == comm.OpRecv {
				sender, recver, seq = peer, c.rank, c.recvSeq
			}
			n := seq[peer]
			seq[peer]++
			o.peers = []int{peer}
			o.slot = n
			o.id = fmt.Sprintf("p%d-%d-%d", sender, recver, n)
			if sender > recver {
				o.slot |= p2pDirection
			}
		}
	} else {
		o.slot, o.tag = c.seq, uint32(c.seq)
		o.id = fmt.Sprintf("c%d", c.seq)
		c.seq++
		for r := range c.size {
			if r != c.rank {
				o.peers = append(o.peers, r)
			}
		}
		o.prev, c.last = c.last, o.done
	}
	if argErr != nil {
		me.failed = true
		o.me = me
		o.err = c.errorf(k, nil, argErr)
	}
	return o
}

// fail breaks the group; it reports whether err is the first failure.
func (c *glooComm) fail(err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken == nil {
		c.broken = err
		return true
	}
	return false
}

func (c *glooComm) isBroken() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken
}

// left is the time o may still take.
func (o *op) left() time.Duration {
	d, _ := o.ctx.Deadline()
	return time.Until(d)
}

// exec waits for the previous collective, exchanges descriptors, checks
// them, then runs body with the time left.
func (o *op) exec(body func(left time.Duration) error) {
	c := o.c
	select {
	case <-o.done: // failed at start
		return
	default:
	}
	defer func() {
		o.cancel()
		if o.err != nil {
			var ce *comm.Error
			if errors.As(o.err, &ce) && c.fail(ce.Err) {
				o.publish(ce)
			}
		}
		close(o.done)
	}()
	if o.prev != nil {
		<-o.prev // over by its own deadline, which is no later than ours
	}
	if err := c.isBroken(); err != nil && o.err == nil {
		o.err = c.errorf(o.me.call.Op, nil, fmt.Errorf("%w: group broken by an earlier failure: %w", comm.ErrAborted, err))
		return
	}
	if err := o.exchange(); err != nil {
		if o.err == nil {
			o.err = err
		}
		return
	}
	if o.err != nil { // this rank's arguments were bad; the others know now
		return
	}
	if err := o.check(); err != nil {
		o.err = err
		return
	}
	if err := body(o.left()); err != nil {
		var f *shimFail
		if errors.As(err, &f) {
			silent, how := o.postMortem()
			o.err = c.errorf(o.me.call.Op, silent, fmt.Errorf("%w: %s: %w", f.sentinel(), how, err))
		} else {
			o.err = c.errorf(o.me.call.Op, nil, err)
		}
	}
}

// exchange sends this rank's descriptor to its peers and receives theirs,
// naming the peers that never sent one (ErrTimeout) or whose connection
// failed (ErrAborted).
func (o *op) exchange() error {
	c := o.c
	k := o.me.call.Op
	if len(o.peers) == 0 { // a group of one, or a Send or Recv with a bad peer
		o.all = map[int]desc{c.rank: o.me}
		return nil
	}
	slot := uint64(slotDesc) | o.slot
	if k == comm.OpSend || k == comm.OpRecv {
		slot = uint64(slotP2PDesc) | o.slot
	}
	if err := o.ctx.Err(); errors.Is(err, context.Canceled) {
		return c.errorf(k, []int{c.rank}, fmt.Errorf("%w: rank %d cancelled its call before it started: %w", comm.ErrAborted, c.rank, err))
	} else if err != nil {
		return c.errorf(k, nil, fmt.Errorf("%w before the call started: %w", comm.ErrTimeout, err))
	}
	np := len(o.peers)
	mine := o.me.encode()
	theirs := make([]int64, np*descLen)
	peers := make([]C.int, np)
	for i, p := range o.peers {
		peers[i] = C.int(p)
	}
	from := make([]C.int, np)
	status := make([]C.int, np)
	started := time.Now()
	abort := newAborter(o.ctx)
	f := shim(func(e *C.char, n C.size_t) C.int {
		return C.dg_gloo_exchange(c.ctx, C.uint64_t(slot), unsafe.Pointer(&mine[0]), 8*descLen, &peers[0], C.int(np),
			unsafe.Pointer(&theirs[0]), &from[0], &status[0], millis(o.left()), abort.tok, e, n)
	})
	abort.free()
	if f != nil {
		var dead, missing []int
		for i, p := range o.peers {
			switch status[i] {
			case C.DG_GLOO_IO:
				dead = append(dead, p)
			case C.DG_GLOO_TIMEOUT:
				missing = append(missing, p)
			}
		}
		cancelled := func(cause error) error {
			return c.errorf(k, []int{c.rank}, fmt.Errorf("%w: rank %d cancelled its call after %v, ranks %v not joined: %w",
				comm.ErrAborted, c.rank, time.Since(started).Round(time.Millisecond), missing, cause))
		}
		if f.code == C.DG_GLOO_ABORTED {
			return cancelled(context.Cause(o.ctx))
		}
		if f.code != C.DG_GLOO_TIMEOUT || len(missing) == 0 {
			// A connection failed, here or at a peer that then closed
			// its own: who is gone is who does not report.
			silent, how := o.postMortem()
			if len(silent) == 0 {
				silent = dead
			}
			return c.errorf(k, silent, fmt.Errorf("%w: %s: %w", f.sentinel(), how, f))
		}
		// A peer missing here may be alive, one call behind and stuck on
		// the rank that failed: say so before asking, and give its report
		// the time to arrive.
		window := min(reportWindow, c.w.timeout)
		ctx, cancel := context.WithTimeout(context.Background(), window)
		o.mark(ctx) // best effort: the store may be gone
		cancel()
		named, notes := o.resolve(missing, window)
		if notes != "" {
			return c.errorf(k, named, fmt.Errorf("%w after %v: ranks %v never joined (%s): %w",
				comm.ErrAborted, time.Since(started).Round(time.Millisecond), missing, notes, f))
		}
		if err := o.ctx.Err(); errors.Is(err, context.Canceled) {
			return cancelled(err) // as Gloo's deadline passed: the cancel is the cause
		}
		return c.errorf(k, missing, comm.NotJoined(o.callerBinds, time.Since(started), fmt.Sprint(missing), f))
	}
	o.all = map[int]desc{c.rank: o.me}
	for i := range np {
		o.all[int(from[i])] = decode(theirs[i*descLen : (i+1)*descLen])
	}
	return nil
}

// check compares the descriptors: failed ranks, then mismatches (the
// ranks outside the largest class of equal calls, ties to the class of the
// lowest rank).
func (o *op) check() error {
	k := o.me.call.Op
	ranks := make([]int, 0, len(o.all))
	for r := range o.all {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	var failed []int
	for _, r := range ranks {
		if o.all[r].failed {
			failed = append(failed, r)
		}
	}
	if len(failed) > 0 {
		return o.c.errorf(k, failed, fmt.Errorf("%w: ranks %v failed their %v", comm.ErrAborted, failed, k))
	}
	ref, best := ranks[0], 0
	for _, p := range ranks {
		n := 0
		for _, q := range ranks {
			if o.all[p].call.Matches(o.all[q].call) {
				n++
			}
		}
		if n > best {
			ref, best = p, n
		}
	}
	if best == len(ranks) {
		return nil
	}
	p2p := k == comm.OpSend || k == comm.OpRecv
	var bad []int
	var calls []string
	for _, r := range ranks {
		calls = append(calls, fmt.Sprintf("rank %d: %v", r, o.all[r].call))
		if p2p || !o.all[ref].call.Matches(o.all[r].call) {
			bad = append(bad, r)
		}
	}
	return o.c.errorf(k, bad, fmt.Errorf("%w: ranks %v called something else: %s", comm.ErrMismatch, bad, strings.Join(calls, "; ")))
}
