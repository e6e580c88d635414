//go:build mpi

package mpi

/*
#include "mpi_shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Options configure World.
type Options struct {
	// Timeout is every operation's deadline; 0 means comm.DefaultTimeout().
	Timeout time.Duration
	// Threads sizes the C pool used to widen and round halves; 0: one per CPU.
	Threads int
}

// group is what the handles of one MPI communicator share in this process.
type mpiComm struct {
	comm, desc C.MPI_Comm // data and descriptor communicators
	rank, size int
	name       string
	members    []int
	timeout    time.Duration
	cpu        *backend.CPU

	mu         sync.Mutex
	lastIssued chan struct{} // closed when the previous collective is in MPI
	sendSeq    map[int]int
	broken     error
	closed     bool
}

var _ comm.Comm = (*mpiComm)(nil)

// World returns this process's handle on MPI_COMM_WORLD, initializing MPI.
func World(opts Options) (comm.Comm, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		d, err := comm.DefaultTimeout()
		if err != nil {
			return nil, err
		}
		timeout = d
	}
	cpu, err := backend.NewCPU(opts.Threads)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	var size, rank C.int
	C.MPI_Comm_size(C.dg_world(), &size)
	C.MPI_Comm_rank(C.dg_world(), &rank)
	members := make([]int, size)
	for i := range members {
		members[i] = i
	}
	return newComm(C.dg_world(), "world", members, int(rank), int(size), timeout, cpu)
}

// newComm wraps c (duplicated for descriptors); mu must be held.
func newComm(c C.MPI_Comm, name string, members []int, rank, size int, timeout time.Duration, cpu *backend.CPU) (*mpiComm, error) {
	var desc C.MPI_Comm
	if err := mpiErr("MPI_Comm_dup", C.MPI_Comm_dup(c, &desc)); err != nil {
		return nil, err
	}
	C.dg_errors_return(c)
	C.dg_errors_return(desc)
	done := make(chan struct{})
	close(done)
	return &mpiComm{comm: c, desc: desc, rank: rank, size: size, name: name, members: members,
		timeout: timeout, cpu: cpu, lastIssued: done}, nil
}

func (c *mpiComm) Rank() int      { return c.rank }
func (c *mpiComm) Size() int      { return c.size }
func (c *mpiComm) Name() string   { return c.name }
func (c *mpiComm) Members() []int { return append([]int(nil), c.members...) }

func (c *mpiComm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

// ---- descriptors ------------------------------------------------------------

const descLen = 6 // op, dtype, count, red, root, failed

const (
	tagColl     = 1
	tagSender   = 2 // a Send's descriptor
	tagReceiver = 3 // a Recv's descriptor
)

func encode(call comm.Call, failed bool) [descLen]int64 {
	f := int64(0)
	if failed {
		f = 1
	}
	return [descLen]int64{int64(call.Op), int64(call.DType), int64(call.Count), int64(call.Red), int64(call.Root), f}
}

func decode(d []int64) (comm.Call, bool) {
	return comm.Call{Op: comm.OpKind(d[0]), DType: tensor.DType(d[1]), Count: int(d[2]), Red: comm.ReduceOp(d[3]), Root: int(d[4])}, d[5] != 0
}

// cbuf is C memory MPI may keep using after the cgo call returns.
type cbuf struct {
	p unsafe.Pointer
	n int
}

func newCbuf(n int) cbuf { return cbuf{C.malloc(C.size_t(max(n, 1))), n} }
func (b cbuf) free()     { C.free(b.p) }
func (b cbuf) int64s() []int64 {
	return unsafe.Slice((*int64)(b.p), b.n/8)
}

// poll waits for reqs under the deadline, calling MPI_Testall in a loop
// (Open MPI progresses inside it). It reports which requests are
// still pending when ctx ends.
func poll(ctx context.Context, reqs []request) (pending []int, err error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	for i := 0; ; i++ {
		var flag C.int
		mu.Lock()
		rc := C.dg_testall(C.int(len(reqs)), &reqs[0], &flag)
		mu.Unlock()
		if err := mpiErr("MPI_Testall", rc); err != nil {
			return nil, err
		}
		if flag != 0 {
			return nil, nil
		}
		if i%64 == 0 && ctx.Err() != nil {
			mu.Lock()
			for k := range reqs {
				var f C.int
				if C.MPI_Test(&reqs[k], &f, nil) == C.MPI_SUCCESS && f == 0 {
					pending = append(pending, k)
				}
			}
			mu.Unlock()
			return pending, ctx.Err()
		}
		// Open MPI progresses only inside MPI_Test: spin first, then back
		// off a little so that the peer processes (often sharing the
		// cores) get to run; measured faster than pure spinning on 2 CPUs.
		if i > 1000 {
			time.Sleep(20 * time.Microsecond)
		} else {
			runtime.Gosched()
		}
	}
}

func cancelAll(reqs []request) {
	mu.Lock()
	for k := range reqs {
		C.dg_cancel_free(&reqs[k])
	}
	mu.Unlock()
}

// ---- operation driver -------------------------------------------------------

// op is one call in flight; it implements comm.Work.
type op struct {
	c      *mpiComm
	call   comm.Call
	ctx    context.Context
	cancel context.CancelFunc
	// callerBinds: the caller's context deadline, not the group's timeout,
	// bounds ctx (comm.CallerBinds)
	callerBinds bool
	peers       []int
	sbuf        cbuf
	rbuf        cbuf
	reqs        []request
	prev        chan struct{} // collectives: the previous one is issued
	issued      chan struct{} // collectives: this one is issued
	err         error
	done        chan struct{}
}

func (o *op) Done() <-chan struct{} { return o.done }

func (o *op) Wait(ctx context.Context) error {
	return comm.WaitDone(ctx, o.done, func() error { return o.err }, o.call.Op, o.c.name, o.c.rank)
}

func (c *mpiComm) errorf(k comm.OpKind, ranks []int, err error) *comm.Error {
	return &comm.Error{Op: k.String(), Group: c.name, Rank: c.rank, Ranks: ranks, Err: err}
}

// start posts this rank's descriptor to the ranks taking part, in call
// order, and returns the op; exec then finishes it.
func (c *mpiComm) start(ctx context.Context, call comm.Call, argErr error) *op {
	o := &op{c: c, call: call, done: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		o.err = c.errorf(call.Op, nil, fmt.Errorf("%w: handle closed", comm.ErrClosed))
		close(o.done)
		return o
	}
	if c.broken != nil {
		o.err = c.errorf(call.Op, nil, fmt.Errorf("%w: group broken by an earlier failure: %w", comm.ErrAborted, c.broken))
		close(o.done)
		return o
	}
	o.callerBinds = comm.CallerBinds(ctx, c.timeout)
	o.ctx, o.cancel = context.WithTimeout(ctx, c.timeout)
	stag, rtag := tagColl, tagColl
	switch call.Op {
	case comm.OpSend:
		o.peers, stag, rtag = []int{call.Root}, tagSender, tagReceiver
	case comm.OpRecv:
		o.peers, stag, rtag = []int{call.Root}, tagReceiver, tagSender
	default:
		for r := range c.size {
			if r != c.rank {
				o.peers = append(o.peers, r)
			}
		}
		o.prev, o.issued = c.lastIssued, make(chan struct{})
		c.lastIssued = o.issued
	}
	if argErr != nil && (call.Op == comm.OpSend || call.Op == comm.OpRecv) && (call.Root < 0 || call.Root >= c.size || call.Root == c.rank) {
		o.peers = nil // no valid peer to tell
	}
	o.sbuf, o.rbuf = newCbuf(8*descLen), newCbuf(8*descLen*len(o.peers))
	d := encode(call, argErr != nil)
	copy(o.sbuf.int64s(), d[:])
	o.reqs = make([]request, 2*len(o.peers))
	mu.Lock()
	for i, p := range o.peers {
		C.MPI_Irecv(unsafe.Add(o.rbuf.p, 8*descLen*i), descLen, C.dg_dtype(4), C.int(p), C.int(rtag), c.desc, &o.reqs[i])
		C.MPI_Isend(o.sbuf.p, descLen, C.dg_dtype(4), C.int(p), C.int(stag), c.desc, &o.reqs[len(o.peers)+i])
	}
	mu.Unlock()
	if argErr != nil {
		o.err = c.errorf(call.Op, nil, argErr)
	}
	return o
}

func (c *mpiComm) fail(err error) {
	c.mu.Lock()
	if c.broken == nil {
		c.broken = err
	}
	c.mu.Unlock()
}

// exec completes the descriptor exchange, checks it, then runs body (which
// issues non-blocking MPI calls and returns their requests and a finishing
// step) and waits for it.
func (o *op) exec(body func() ([]request, func() error, error)) {
	c := o.c
	defer func() {
		if o.issued != nil {
			select {
			case <-o.issued:
			default:
				close(o.issued)
			}
		}
		if o.cancel != nil {
			o.cancel()
		}
		if o.sbuf.p != nil {
			o.sbuf.free()
			o.rbuf.free()
		}
		if o.err != nil {
			var ce *comm.Error
			if errors.As(o.err, &ce) {
				c.fail(ce.Err)
			}
		}
		close(o.done)
	}()
	select {
	case <-o.done:
		return
	default:
	}
	started := time.Now()
	pending, err := poll(o.ctx, o.reqs)
	if err != nil {
		var missing []int
		for _, k := range pending {
			if k < len(o.peers) {
				missing = append(missing, o.peers[k])
			}
		}
		cancelAll(o.reqs)
		o.sbuf.p = nil // MPI may still hold them: leak rather than free
		switch {
		case o.err != nil:
		case errors.Is(err, context.Canceled):
			o.err = o.c.errorf(o.call.Op, []int{o.c.rank}, fmt.Errorf("%w: rank %d cancelled its call before ranks %v joined: %w",
				comm.ErrAborted, o.c.rank, missing, err))
		case errors.Is(err, context.DeadlineExceeded):
			o.err = o.c.errorf(o.call.Op, missing, comm.NotJoined(o.callerBinds, time.Since(started), fmt.Sprint(missing), nil))
		default: // MPI_Testall failed (poll names no pending ranks then)
			o.err = o.c.errorf(o.call.Op, missing, fmt.Errorf("%w: waiting for the other ranks: %w", comm.ErrAborted, err))
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
	if o.prev != nil {
		<-o.prev
	}
	reqs, finish, err := body()
	if o.issued != nil {
		close(o.issued)
	}
	if err != nil {
		o.err = c.errorf(o.call.Op, nil, err)
		return
	}
	if _, err := poll(o.ctx, reqs); err != nil {
		o.sbuf.p = nil
		o.err = c.errorf(o.call.Op, nil, fmt.Errorf("%w inside MPI after every rank joined (MPI keeps the buffers; Abort the job): %w", comm.ErrTimeout, err))
		return
	}
	if finish != nil {
		if err := finish(); err != nil {
			o.err = c.errorf(o.call.Op, nil, err)
		}
	}
}

// check compares the descriptors: failed ranks, then mismatches (the ranks
// outside the largest class of equal calls are blamed).
func (o *op) check() error {
	d := o.rbuf.int64s()
	calls := map[int]comm.Call{o.c.rank: o.call}
	var failed []int
	for i, p := range o.peers {
		call, f := decode(d[i*descLen : (i+1)*descLen])
		if f {
			failed = append(failed, p)
		}
		calls[p] = call
	}
	if len(failed) > 0 {
		sort.Ints(failed)
		return o.c.errorf(o.call.Op, failed, fmt.Errorf("%w: ranks %v failed their %v", comm.ErrAborted, failed, o.call.Op))
	}
	ranks := make([]int, 0, len(calls))
	for r := range calls {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	ref, best := ranks[0], 0
	for _, p := range ranks {
		n := 0
		for _, q := range ranks {
			if calls[p].Matches(calls[q]) {
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
	var bad []int
	var desc []string
	p2p := o.call.Op == comm.OpSend || o.call.Op == comm.OpRecv
	for _, r := range ranks {
		desc = append(desc, fmt.Sprintf("rank %d: %v", r, calls[r]))
		if p2p || !calls[ref].Matches(calls[r]) {
			bad = append(bad, r)
		}
	}
	return o.c.errorf(o.call.Op, bad, fmt.Errorf("%w: ranks %v called something else: %s", comm.ErrMismatch, bad, strings.Join(desc, "; ")))
}
