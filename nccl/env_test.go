package nccl

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
)

// FromEnvOf meets at the store the environment names and hands the store to
// NewFromStore. Without a GPU (or without -tags cuda) the constructor's
// error comes back and the store is closed again.
func TestFromEnvOfRendezvous(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
		if c.Size() != 1 || c.Rank() != 0 {
			t.Fatalf("communicator %d of %d, want 0 of 1", c.Rank(), c.Size())
		}
		return
	}
	if !errors.Is(err, comm.ErrUnsupported) && !errors.Is(err, ErrNoCUDA) {
		t.Logf("no communicator here: %v", err)
	}
	// the port is free again: the store was closed on the error path
	l2, err2 := net.Listen("tcp", env.StoreAddr())
	if err2 != nil {
		t.Fatalf("store still listening after a failed FromEnvOf: %v (first error: %v)", err2, err)
	}
	l2.Close()
}
