//go:build !cuda

package nccl

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
)

func noCUDA(op string, rank int) error {
	return &comm.Error{Op: op, Group: "nccl", Rank: rank, Err: fmt.Errorf("%w: %w", comm.ErrUnsupported, ErrNoCUDA)}
}

// Version is the loaded NCCL's version code (e.g. 22707), 0 when none is.
func Version() int { return 0 }

// GetUniqueID makes a new communicator id (ncclGetUniqueId).
func GetUniqueID() (UniqueID, error) { return UniqueID{}, noCUDA("GetUniqueID", 0) }

// New joins rank of a size-rank communicator identified by id, on CUDA
// device dev.
func New(ctx context.Context, id UniqueID, rank, size, dev int, opts Options) (comm.Comm, error) {
	return nil, noCUDA("Init", rank)
}

// NewFromStore is New with the id made by rank 0 and shared through store.
func NewFromStore(ctx context.Context, store *comm.Store, rank, size, dev int, opts Options) (comm.Comm, error) {
	return nil, noCUDA("Init", rank)
}
