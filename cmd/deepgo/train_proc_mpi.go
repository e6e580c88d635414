//go:build mpi

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/mpi"
)

// joinMPI joins MPI_COMM_WORLD (mpirun's job) and checks over it that the
// ranks resolved the same config: mpirun sets no rendezvous address.
func joinMPI(ctx context.Context, timeout time.Duration, digest string) (comm.Comm, func() error, error) {
	c, err := mpi.World(mpi.Options{Timeout: timeout})
	if err != nil {
		return nil, nil, err
	}
	if err := comm.AgreeString(ctx, c, "resolved config (config, model, steps, device) digest", digest); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("the ranks resolved different configs: %w", err), c.Close())
	}
	return c, mpi.Finalize, nil
}

// mpiBuilt says this build has the MPI backend.
const mpiBuilt = true
