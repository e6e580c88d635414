//go:build mpi

package mpi

import "github.com/deepgo-ml/deepgo/backend"

// Backend is the process's CPU backend: the C thread pool the
// communicator widens and rounds halves on, sized by Options.Threads. An
// engine given this communicator and no backend of its own computes on it
// too, so that the thread count is set in one place.
func (c *mpiComm) Backend() backend.Backend { return c.cpu }
