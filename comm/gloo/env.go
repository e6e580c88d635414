//go:build gloo

package gloo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/deepgo-ml/deepgo/comm"
)

// FromEnvOf joins the job env describes: it meets the other ranks at the
// store on env.StoreAddr() (rank 0 serves it), all under opts.Timeout
// (else comm.DefaultTimeout) and ctx. release closes the store connection
// (and, on rank 0, the store); call it after closing the communicator, and
// on rank 0 only once the others are done with the store.
func FromEnvOf(ctx context.Context, env comm.Env, opts Options) (c comm.Comm, release func() error, err error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		if timeout, err = comm.DefaultTimeout(); err != nil {
			return nil, nil, fmt.Errorf("gloo.FromEnvOf: %w", err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	store, server, err := comm.Rendezvous(rctx, env)
	if err != nil {
		return nil, nil, fmt.Errorf("gloo.FromEnvOf: rank %d: rendezvous at %s: %w", env.Rank, env.StoreAddr(), err)
	}
	release = func() error {
		err := store.Close()
		if server != nil {
			err = errors.Join(err, server.Close())
		}
		return err
	}
	if opts.Iface == "" && opts.Hostname == "" && os.Getenv("GLOO_SOCKET_IFNAME") == "" && isLoopback(env.MasterAddr) {
		opts.Hostname = "127.0.0.1"
	}
	c, err = newFromStore(rctx, store, env.Rank, env.WorldSize, opts, 0)
	if err != nil {
		return nil, nil, errors.Join(err, release())
	}
	return c, release, nil
}

// isLoopback reports whether host names this machine's loopback.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
