// Package comm is deepgo's collective-communication layer: one Comm
// interface for a process group (all-reduce, reduce-scatter, all-gather,
// broadcast, reduce, send/recv, all-to-all, barrier), process groups laid
// out on a named Grid (pipe, data, model, seq) with DeepSpeed's rank
// mapping, an environment rendezvous (torchrun, the DeepSpeed launcher or
// mpirun) over a small TCP Store, and the errors every backend returns.
// Small agreements built on AllGather (AllGatherBytes, AllGatherInt64s,
// Agree, AgreeString) let every rank reach the same verdict.
//
// Backends live in subpackages: comm/local runs N ranks as goroutines over
// shared memory (the default on one machine and the engine of every
// multi-rank test), comm/mpi (build tag mpi) runs over Open MPI, comm/gloo
// (build tag gloo) runs between CPU processes over TCP, and comm/staged runs
// device tensors' collectives through host buffers over a host Comm.
//
// Fault model: every operation has a deadline (the context's, or the group's
// timeout, DefaultTimeout unless overridden). A rank that fails, panics,
// leaves, or calls a different operation makes the other ranks' pending and
// later operations on that group fail within the deadline with an *Error
// naming the operation, the group and the ranks at fault; a group that saw
// such a failure is broken and fails every later call at once.
package comm

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/tensor"
)

// ReduceOp selects how a reduction combines the ranks' values.
type ReduceOp uint8

// Reduction operators. Avg is Sum followed by one multiplication by 1/Size()
// (floating dtypes only).
const (
	Sum ReduceOp = iota
	Avg
	Max
	Min
)

// String is the lower-case name, e.g. "sum".
func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(o))
}

// Valid reports whether o is one of the defined operators.
func (o ReduceOp) Valid() bool { return o <= Min }

// NoColor passed to Comm.Split means "this rank joins no new group".
const NoColor = -1

// Work is the handle of an operation started by one of the Async methods.
//
// Until Wait has returned (with any result other than a context error of the
// Wait call itself) the operation may still read and write the tensors it
// was given: the caller must neither modify, read (outputs) nor free them.
// Wait may be called any number of times, from any goroutine; once the
// operation is over it returns the same result each time.
type Work interface {
	// Wait blocks until the operation completes or ctx ends. It returns the
	// operation's error (an *Error), or ctx.Err() wrapped when ctx ends first,
	// in which case the operation keeps running under its own deadline and
	// Wait may be called again.
	Wait(ctx context.Context) error
	// Done is closed when the operation is over, successfully or not.
	Done() <-chan struct{}
}

// Comm is one rank's handle on a process group of Size() ranks.
//
// Every member of the group must make the same sequence of collective calls
// (same method, dtype, element counts, root and operator) in the same order;
// a rank that calls something else gets, like every other member, an *Error
// wrapping ErrMismatch instead of a deadlock. Send and Recv are matched per
// ordered pair of ranks, in call order, independently of the collectives.
//
// Tensors: host tensors (for the local and mpi backends), contiguous, not
// freed, owned by the caller. An operation reads its inputs and writes its
// outputs only between the call and its return (or, for the Async forms,
// the return of Work.Wait); it never retains a tensor afterwards. In place
// means the same tensor is input and output. Reductions accept float32,
// float16 and bfloat16 (accumulated in float32, combined in rank order, so
// the result bits depend only on the inputs, never on timing) and int32 and
// int64 (Sum, Max, Min; exact). Data movement (AllGather, Broadcast,
// AllToAll, Send, Recv) accepts every dtype.
//
// Errors: every error is an *Error (use errors.As) wrapping one of
// ErrInvalid (a bad argument on this rank), ErrUnsupported, ErrMismatch,
// ErrTimeout, ErrAborted (another rank failed, or the world was aborted) or
// ErrClosed (use errors.Is). Any error breaks the group for every member:
// later calls on it fail at once, wrapping the first failure. After an
// error the outputs hold unspecified, possibly partial, results.
//
// Deadlines: each call runs under ctx and the group's timeout, whichever
// ends first. The Async forms start the clock at the call.
//
// A Comm is safe for concurrent use, but concurrent calls are ordered by
// the moment they are made, which must then be the same on every rank.
type Comm interface {
	// Rank is this rank's index in the group, 0 <= Rank() < Size().
	Rank() int
	// Size is the number of ranks in the group.
	Size() int
	// Name identifies the group in errors, e.g. "world" or "data[pipe=1,model=0]".
	Name() string
	// Members lists the world rank of each group rank.
	Members() []int

	// AllReduce sets t, on every rank, to the elementwise reduction of all
	// ranks' t. All ranks pass the same dtype and element count.
	AllReduce(ctx context.Context, t *tensor.Tensor, op ReduceOp) error
	// AllReduceAsync starts AllReduce.
	AllReduceAsync(ctx context.Context, t *tensor.Tensor, op ReduceOp) Work

	// ReduceScatter reduces src (Size()*m elements on every rank) and
	// leaves chunk Rank() of the result, elements [Rank()*m, (Rank()+1)*m),
	// in dst (m elements). dst may be exactly that chunk of src (in place,
	// the ZeRO gradient layout); any other overlap is ErrInvalid.
	ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op ReduceOp) error
	// ReduceScatterAsync starts ReduceScatter.
	ReduceScatterAsync(ctx context.Context, dst, src *tensor.Tensor, op ReduceOp) Work

	// AllGather concatenates every rank's src (m elements each, rank order)
	// into dst (Size()*m elements) on every rank: the partitioned all-gather
	// of ZeRO. src may be exactly chunk Rank() of dst (in place); any other
	// overlap is ErrInvalid. Use Chunks to see dst as per-rank views.
	AllGather(ctx context.Context, dst, src *tensor.Tensor) error
	// AllGatherAsync starts AllGather.
	AllGatherAsync(ctx context.Context, dst, src *tensor.Tensor) Work

	// Broadcast copies root's t into every other rank's t.
	Broadcast(ctx context.Context, t *tensor.Tensor, root int) error
	// BroadcastAsync starts Broadcast.
	BroadcastAsync(ctx context.Context, t *tensor.Tensor, root int) Work

	// Reduce sets root's t to the reduction of all ranks' t; the other
	// ranks' t are inputs only and are left unchanged.
	Reduce(ctx context.Context, t *tensor.Tensor, root int, op ReduceOp) error
	// ReduceAsync starts Reduce.
	ReduceAsync(ctx context.Context, t *tensor.Tensor, root int, op ReduceOp) Work

	// Send delivers t to rank peer, which must call Recv with a tensor of
	// the same dtype and element count. Send returns once the peer has the
	// data (synchronous, like MPI_Ssend): two ranks that Send to each other
	// before receiving time out; use SendAsync for exchanges.
	Send(ctx context.Context, t *tensor.Tensor, peer int) error
	// SendAsync starts Send.
	SendAsync(ctx context.Context, t *tensor.Tensor, peer int) Work
	// Recv fills t with the tensor peer sends.
	Recv(ctx context.Context, t *tensor.Tensor, peer int) error
	// RecvAsync starts Recv.
	RecvAsync(ctx context.Context, t *tensor.Tensor, peer int) Work

	// AllToAll sends chunk j of src to rank j and stores the chunk received
	// from rank j as chunk j of dst; src and dst have Size()*m elements and
	// must not overlap (the Ulysses sequence-parallel exchange).
	AllToAll(ctx context.Context, dst, src *tensor.Tensor) error
	// AllToAllAsync starts AllToAll.
	AllToAllAsync(ctx context.Context, dst, src *tensor.Tensor) Work

	// Barrier returns once every rank has called it.
	Barrier(ctx context.Context) error
	// BarrierAsync starts Barrier.
	BarrierAsync(ctx context.Context) Work

	// Split is a collective that partitions the group: ranks passing the same
	// color form a new group, ordered by key (ties by rank), named name (the
	// lowest-key member's name wins; "" derives one). A rank passing NoColor
	// gets a nil Comm and a nil error. Like MPI_Comm_split.
	Split(ctx context.Context, color, key int, name string) (Comm, error)

	// Close releases this rank's handle; later calls fail with ErrClosed.
	// No call may be in flight. Closing a handle does not close the groups
	// split from it.
	Close() error
}

// Chunks views a contiguous 1-D-able tensor as n equal consecutive parts
// (its element count must divide by n), e.g. the per-rank slots of an
// AllGather output.
func Chunks(t *tensor.Tensor, n int) ([]*tensor.Tensor, error) {
	if n < 1 || t.Numel()%n != 0 {
		return nil, fmt.Errorf("comm.Chunks: %v does not split into %d equal parts", t, n)
	}
	m := t.Numel() / n
	out := make([]*tensor.Tensor, n)
	for i := range out {
		c, err := t.Slice(i*m, m)
		if err != nil {
			return nil, fmt.Errorf("comm.Chunks: %w", err)
		}
		out[i] = c
	}
	return out, nil
}
