package nccl

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/stretchr/testify/require"
)

// FromEnvOf meets at the store the environment names and hands the store to
// NewFromStore. Without a GPU (or without -tags cuda) the constructor's
// error comes back and the store is closed again.
func TestFromEnvOfRendezvous(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	env := comm.Env{Rank: 0, WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: port}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, release, err := FromEnvOf(ctx, env, Options{Timeout: 5 * time.Second})
	if err == nil {
		// a machine with a GPU: a one-rank communicator came up
		defer release()
		defer c.Close()
		require.Equal(t, 1, c.Size(), "communicator size")
		require.Equal(t, 0, c.Rank(), "communicator rank")
		return
	}
	if !errors.Is(err, comm.ErrUnsupported) && !errors.Is(err, ErrNoCUDA) {
		t.Logf("no communicator here: %v", err)
	}
	// the port is free again: the store was closed on the error path
	l2, err2 := net.Listen("tcp", env.StoreAddr())
	require.NoError(t, err2, "store still listening after a failed FromEnvOf (first error: %v)", err)

	l2.Close()
}
