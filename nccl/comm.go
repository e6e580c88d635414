//go:build cuda

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/cuda"
	"github.com/deepgo-ml/deepgo/tensor"
)

// UniqueID must be exactly ncclUniqueId: it is passed to C by address.
var (
	_ [unsafe.Sizeof(C.ncclUniqueId{}) - unsafe.Sizeof(UniqueID{})]byte
	_ [unsafe.Sizeof(UniqueID{}) - unsafe.Sizeof(C.ncclUniqueId{})]byte
)

// ncclComm is one rank's handle on an NCCL communicator.
type ncclComm struct {
	dev, rank, size int
	name            string
	members         []int
	timeout         time.Duration
	stream          *cuda.Stream
	ownStream       bool
	compute         *cuda.Stream   // Options.Compute
	before          unsafe.Pointer // event on the compute stream, recorded before each operation (under mu)
	barrier         *tensor.Tensor // one int32 on the device, for Barrier

	mu     sync.Mutex // serializes every NCCL call on h, guards the fields below
	h      C.ncclComm_t
	broken error // the first failure; h is aborted (nil) once set
	closed bool
	nsplit int
	events []unsafe.Pointer // idle completion events
}

var _ comm.Comm = (*ncclComm)(nil)

// GetUniqueID makes a new communicator id (ncclGetUniqueId).
func GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := load(); err != nil {
		return id, &comm.Error{Op: "GetUniqueID", Group: "nccl", Err: fmt.Errorf("%w: %w", comm.ErrUnsupported, err)}
	}
	r := C.dg_nccl_unique_id((*C.ncclUniqueId)(unsafe.Pointer(&id)))
	if err := check("ncclGetUniqueId", nil, r, 0); err != nil {
		return id, &comm.Error{Op: "GetUniqueID", Group: "nccl", Err: err}
	}
	return id, nil
}

// NewFromStore is New with the id made by rank 0 and shared through store
// under opts.Key; the other ranks wait for it until ctx's deadline. The id
// is written once (Store.SetOnce): a second communicator under the same key
// in one store generation fails with comm.ErrRefused naming the key, rather
// than overwriting the id ranks may still be reading.
func NewFromStore(ctx context.Context, store *comm.Store, rank, size, dev int, opts Options) (comm.Comm, error) {
	if opts.Name == "" {
		opts.Name = "world"
	}
	key := opts.Key
	if key == "" {
		key = "nccl/" + opts.Name + "/id"
	}
	fail := func(err error) error { return &comm.Error{Op: "Init", Group: opts.Name, Rank: rank, Err: err} }
	if store == nil {
		return nil, fail(fmt.Errorf("%w: store is nil", comm.ErrInvalid))
	}
	var id UniqueID
	if rank == 0 {
		var err error
		if id, err = GetUniqueID(); err != nil {
			return nil, err
		}
		if err := store.SetOnce(ctx, key, id[:]); err != nil {
			return nil, err
		}
	} else {
		b, err := store.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		if len(b) != len(id) {
			return nil, fail(fmt.Errorf("%w: store key %q holds %d bytes, not an NCCL id", comm.ErrInvalid, key, len(b)))
		}
		copy(id[:], b)
	}
	return New(ctx, id, rank, size, dev, opts)
}

// New joins rank (0 <= rank < size) of the communicator identified by id on
// CUDA device dev; every rank must call it, each with its own device, before
// ctx's deadline and opts.Timeout. The result is safe for concurrent use.
func New(ctx context.Context, id UniqueID, rank, size, dev int, opts Options) (comm.Comm, error) {
	name := opts.Name
	if name == "" {
		name = "world"
	}
	fail := func(err error) error { return &comm.Error{Op: "Init", Group: name, Rank: rank, Err: err} }
	if size < 1 || rank < 0 || rank >= size {
		return nil, fail(fmt.Errorf("%w: rank %d of size %d", comm.ErrInvalid, rank, size))
	}
	if err := load(); err != nil {
		return nil, fail(fmt.Errorf("%w: %w", comm.ErrUnsupported, err))
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		var err error
		if timeout, err = comm.DefaultTimeout(); err != nil {
			return nil, fail(fmt.Errorf("%w: %w", comm.ErrInvalid, err))
		}
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		return nil, fail(fmt.Errorf("%w: no CUDA device: %v", comm.ErrUnsupported, err))
	} else if dev < 0 || dev >= n {
		return nil, fail(fmt.Errorf("%w: device %d: this machine has devices 0..%d", comm.ErrInvalid, dev, n-1))
	}
	if opts.Compute != nil && opts.Compute.Device() != dev {
		return nil, fail(fmt.Errorf("%w: Options.Compute is on device %d, not %d", comm.ErrInvalid, opts.Compute.Device(), dev))
	}
	c := &ncclComm{dev: dev, rank: rank, size: size, name: name, timeout: timeout, members: make([]int, size), compute: opts.Compute}
	for i := range c.members {
		c.members[i] = i
	}
	if err := c.setup(opts.Stream); err != nil {
		return nil, fail(err)
	}
	var h C.ncclComm_t
	var cuerr C.int
	r := C.dg_nccl_init(C.int(dev), &h, C.int(size), (*C.ncclUniqueId)(unsafe.Pointer(&id)), C.int(rank), &cuerr)
	err := check("ncclCommInitRankConfig", h, r, cuerr)
	if err == nil {
		err = settle(ctx, c.deadline(ctx), "ncclCommInitRankConfig", h)
	}
	if err != nil {
		if h != nil {
			C.dg_nccl_abort(C.int(dev), h)
		}
		c.release()
		return nil, fail(err)
	}
	c.h = h
	return c, nil
}

// setup makes or borrows the stream and allocates the barrier's element.
func (c *ncclComm) setup(s *cuda.Stream) error {
	if s != nil {
		if s.Device() != c.dev {
			return fmt.Errorf("%w: Options.Stream is on device %d, not %d", comm.ErrInvalid, s.Device(), c.dev)
		}
		c.stream = s
	} else {
		var err error
		if c.stream, err = cuda.NewStream(c.dev); err != nil {
			return fmt.Errorf("%w: %w", comm.ErrAborted, err)
		}
		c.ownStream = true
	}
	var err error
	if c.barrier, err = cuda.Malloc(c.dev, tensor.Int32, 1); err != nil {
		c.release()
		return fmt.Errorf("%w: %w", comm.ErrAborted, err)
	}
	return nil
}

// release frees what setup made and the idle events.
func (c *ncclComm) release() {
	if c.barrier != nil {
		c.barrier.Storage().Free()
	}
	if c.ownStream && c.stream != nil {
		c.stream.Close()
	}
	for _, ev := range c.events {
		C.dg_nccl_event_destroy(C.int(c.dev), ev)
	}
	c.events = nil
	if c.before != nil {
		C.dg_nccl_event_destroy(C.int(c.dev), c.before)
		c.before = nil
	}
}

// settle waits until every handle leaves ncclInProgress: NCCL forbids any
// other call on a non-blocking communicator until then. It returns an
// error wrapping ErrTimeout, or ErrAborted when ctx is cancelled.
func settle(ctx context.Context, deadline time.Time, call string, hs ...C.ncclComm_t) error {
	wait := 10 * time.Microsecond
	for {
		busy := false
		for _, h := range hs {
			var st C.ncclResult_t
			if err := check("ncclCommGetAsyncError", h, C.dg_nccl_async_error(h, &st), 0); err != nil {
				return err
			}
			if err := check(call, h, st, 0); err != nil {
				return err
			}
			busy = busy || st == C.ncclInProgress
		}
		if !busy {
			return nil
		}
		if err := expired(ctx, deadline); err != nil {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Millisecond)
	}
}

// expired is the error of a deadline passed or a context ended, else nil.
func expired(ctx context.Context, deadline time.Time) error {
	if err := ctx.Err(); err == context.DeadlineExceeded {
		return fmt.Errorf("%w: the context's deadline passed; communicator aborted", comm.ErrTimeout)
	} else if err != nil {
		return fmt.Errorf("%w: %w; communicator aborted", comm.ErrAborted, err)
	}
	if !time.Now().Before(deadline) {
		return fmt.Errorf("%w: the deadline passed; communicator aborted", comm.ErrTimeout)
	}
	return nil
}

// deadline is when a call made now under ctx must be over.
func (c *ncclComm) deadline(ctx context.Context) time.Time {
	d := time.Now().Add(c.timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

func (c *ncclComm) errorf(op comm.OpKind, err error) *comm.Error {
	return &comm.Error{Op: op.String(), Group: c.name, Rank: c.rank, Err: err}
}

// unusableLocked is the error of a call on a closed or broken handle.
func (c *ncclComm) unusableLocked() error {
	if c.closed {
		return fmt.Errorf("%w: this rank's handle was closed", comm.ErrClosed)
	}
	if c.broken != nil {
		return fmt.Errorf("%w: group broken by an earlier failure: %w", comm.ErrAborted, c.broken)
	}
	return nil
}

// breakLocked records the group's first failure and aborts the
// communicator, which also makes NCCL's kernels on the stream exit.
func (c *ncclComm) breakLocked(err error) {
	if c.broken == nil {
		c.broken = err
	}
	if c.h != nil {
		C.dg_nccl_abort(C.int(c.dev), c.h)
		c.h = nil
	}
}

func (c *ncclComm) Rank() int    { return c.rank }
func (c *ncclComm) Size() int    { return c.size }
func (c *ncclComm) Name() string { return c.name }

// Device is the GPU whose memory the communicator moves (the engine checks
// that it is its backend's).
func (c *ncclComm) Device() tensor.Device { return tensor.CUDA(c.dev) }
func (c *ncclComm) Members() []int {
	return append([]int(nil), c.members...)
}

// Close finalizes the communicator (flushing NCCL's pending work, under the
// group's timeout, aborting past it) and frees it; a broken one was
// already aborted.
func (c *ncclComm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var err error
	if c.h != nil {
		dev := C.int(c.dev)
		e := check("ncclCommFinalize", c.h, C.dg_nccl_finalize(dev, c.h), 0)
		if e == nil {
			e = settle(context.Background(), time.Now().Add(c.timeout), "ncclCommFinalize", c.h)
		}
		if e == nil {
			e = check("ncclCommDestroy", nil, C.dg_nccl_destroy(dev, c.h), 0)
		} else {
			C.dg_nccl_abort(dev, c.h)
		}
		if e != nil {
			err = &comm.Error{Op: "Close", Group: c.name, Rank: c.rank, Err: e}
		}
		c.h = nil
	}
	c.release()
	return err
}
