//go:build !gloo

package gloo

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
)

// Available reports whether this build has Gloo.
func Available() bool { return false }

func noGloo(op string, rank int) error {
	return &comm.Error{Op: op, Group: "gloo", Rank: rank, Err: fmt.Errorf("%w: %s", comm.ErrUnsupported, noGlooHint)}
}

// NewFromStore joins rank of a size-rank Gloo group whose ranks meet
// through store.
func NewFromStore(ctx context.Context, store *comm.Store, rank, size int, opts Options) (comm.Comm, error) {
	return nil, noGloo("Init", rank)
}

// FromEnvOf joins the job env describes: it meets the other ranks at the
// store on env.StoreAddr() (rank 0 serves it). release closes the store
// connection (and, on rank 0, the store); call it after closing the
// communicator.
func FromEnvOf(ctx context.Context, env comm.Env, opts Options) (c comm.Comm, release func() error, err error) {
	return nil, nil, noGloo("Init", env.Rank)
}

// noGlooHint says how to get a build with Gloo.
const noGlooHint = "this build has no Gloo: install Debian's libgloo-dev (apt install libgloo-dev) and build with -tags gloo (go install -tags gloo ./cmd/deepgo; make adds the tag to its builds and tests when Gloo is installed)"
