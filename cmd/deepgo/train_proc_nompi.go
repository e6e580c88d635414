//go:build !mpi

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
)

// joinMPI: this build has no MPI.
func joinMPI(ctx context.Context, timeout time.Duration, digest string) (comm.Comm, func() error, error) {
	return nil, nil, fmt.Errorf("--dist-backend mpi: %w: this build has no MPI: install Open MPI (apt install libopenmpi-dev) and build with -tags mpi (go install -tags mpi ./cmd/deepgo, with gloo too where libgloo-dev is installed)", comm.ErrUnsupported)
}

// mpiBuilt says this build has the MPI backend.
const mpiBuilt = false
