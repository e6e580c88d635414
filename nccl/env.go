package nccl

import (
	"context"
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/comm"
)

// FromEnv joins the job the launcher describes (torchrun's and the DeepSpeed
// launcher's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, or
// mpirun's OMPI_COMM_WORLD_*): it meets the other ranks at the store on
// MASTER_ADDR:MASTER_PORT (rank 0 serves it), rank 0 makes the NCCL unique
// id and shares it there, and each rank binds to CUDA device LOCAL_RANK.
//
// release closes the store connection (and, on rank 0, the store itself);
// call it after closing the communicator. On error nothing is left open.
func FromEnv(ctx context.Context, opts Options) (c comm.Comm, release func() error, err error) {
	env, err := comm.EnvFromOS()
	if err != nil {
		return nil, nil, fmt.Errorf("nccl.FromEnv: %w", err)
	}
	return FromEnvOf(ctx, env, opts)
}

// FromEnvOf is FromEnv for an explicit comm.Env.
func FromEnvOf(ctx context.Context, env comm.Env, opts Options) (c comm.Comm, release func() error, err error) {
	store, server, err := comm.Rendezvous(ctx, env)
	if err != nil {
		return nil, nil, fmt.Errorf("nccl.FromEnv: rendezvous at %s: %w", env.StoreAddr(), err)
	}
	release = func() error {
		err := store.Close()
		if server != nil {
			err = errors.Join(err, server.Close())
		}
		return err
	}
	c, err = NewFromStore(ctx, store, env.Rank, env.WorldSize, env.LocalRank, opts)
	if err != nil {
		return nil, nil, errors.Join(err, release())
	}
	return c, release, nil
}
