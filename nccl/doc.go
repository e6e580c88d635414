// Package nccl is the NCCL backend of comm: one process per GPU, device
// tensors, every operation queued on a CUDA stream (build tag cuda).
//
// Loading: the package is compiled against nccl.h but not linked with
// libnccl. On first use it dlopens libnccl.so.2 (RTLD_NOW|RTLD_LOCAL) from,
// in order: $DEEPGO_NCCL_LIB (a file or a folder), lib/ and the folder next
// to the executable (build/cuda/lib for build/cuda/nccl.test, where
// scripts/build-cuda.sh links the toolchain's copy), the dynamic loader's
// search (LD_LIBRARY_PATH, ld.so.cache), and build/cuda/lib of the source
// tree it was built from. So a binary built here runs wherever an NCCL
// 2.18+ can be found, and a build without NCCL installed still compiles and
// links. scripts/gpu-check.sh sets DEEPGO_NCCL_LIB to the toolchain's NCCL.
//
// Communicators are non-blocking (ncclConfig_t.blocking = 0): init, split
// and the enqueue of every operation return at once and are polled with
// ncclCommGetAsyncError, so each has a deadline. When a deadline passes, the
// caller's context ends, or NCCL reports an asynchronous error, the
// communicator is aborted (ncclCommAbort): no rank hangs, and the group is
// broken, failing every later call at once, as comm.Comm requires.
//
// Ordering: operations run on the communicator's stream in call order; the
// stream is a blocking one (see cuda.Stream), so it is also ordered with
// cuda.Malloc and the Copy functions, but not with other streams, a
// cuda.Backend's included. The rank's compute stream is ordered with the
// collectives by events, without the host waiting: each operation's
// stream first waits for the work queued on the compute stream so far, and
// the compute stream waits for the operation before anything queued on it
// later. The compute stream is that of the backend the operation's context
// carries (backend.NewContext, a *cuda.Backend on the communicator's
// device), else Options.Compute. Passing the compute stream as
// Options.Stream orders them without events.
//
// Differences from comm.Comm's reference semantics, inherent to NCCL: a
// rank calling a different operation is not detected (ranks wait until the
// deadline and fail with ErrTimeout, naming no ranks); half-precision
// reductions follow NCCL's algorithm order and precision, not rank order in
// float32; Avg is ncclAvg. Without the cuda tag every constructor returns an
// error wrapping ErrNoCUDA and comm.ErrUnsupported.
package nccl

import (
	"errors"
	"time"

	"github.com/deepgo-ml/deepgo/cuda"
)

// ErrNoCUDA is wrapped by every constructor's error in a build without the
// cuda tag.
var ErrNoCUDA = errors.New("nccl: built without CUDA support (rebuild with -tags cuda after scripts/build-cuda.sh)")

// UniqueID is NCCL's ncclUniqueId: made by one rank (GetUniqueID), shared
// with the others out of band, and passed to New by all.
type UniqueID [128]byte

// Options configure a communicator.
type Options struct {
	// Timeout is every operation's deadline; 0 means comm.DefaultTimeout().
	Timeout time.Duration
	// Name names the group in errors; "" means "world".
	Name string
	// Stream is the stream operations are queued on; nil makes one on the
	// device. A given stream is borrowed (not closed) and shared by groups
	// split from this one.
	Stream *cuda.Stream
	// Compute is the rank's compute stream, for operations whose context
	// carries no *cuda.Backend (see Ordering above); nil orders nothing
	// beyond the stream rules. Groups split from this one inherit it.
	Compute *cuda.Stream
	// Key is where NewFromStore publishes the unique id; "" means
	// "nccl/<Name>/id". Use a fresh key for every communicator of a job.
	Key string
}
