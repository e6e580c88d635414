package comm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newStore(t *testing.T) (*StoreServer, func() *Store) {
	t.Helper()
	srv, err := ListenStore("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv, func() *Store {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := DialStore(ctx, srv.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
}

func TestStoreSetGetAddWait(t *testing.T) {
	_, dial := newStore(t)
	a, b := dial(), dial()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan []byte)
	go func() {
		v, err := b.Get(ctx, "nccl/unique_id") // waits for the Set below
		assert.NoError(t, err)
		got <- v
	}()
	waitStack(t, "the server waiting for the key", serverWaiting)
	require.NoError(t, a.Set(ctx, "nccl/unique_id", []byte{0, 1, 2, 255}))
	require.Equal(t, "[0 1 2 255]", fmt.Sprint(<-got), "Get")
	for i := 1; i <= 3; i++ {
		n, err := a.Add(ctx, "arrived", 1)
		require.NoError(t, err, "Add #%d", i)
		require.Equal(t, int64(i), n, "Add #%d", i)
	}
	require.NoError(t, b.Wait(ctx, "arrived", "nccl/unique_id"))
}

func TestStoreGetTimeout(t *testing.T) {
	_, dial := newStore(t)
	s := dial()
	const wait = 200 * time.Millisecond
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := s.Get(ctx, "never")
	// ErrTimeout is the server's answer at the deadline; had it not
	// answered, the client would fail a second later with ErrAborted.
	var ce *Error
	require.ErrorIs(t, err, ErrTimeout, "Get")
	require.ErrorAs(t, err, &ce, "Get")
	require.Equal(t, "Store.Get", ce.Op, "Get")
	// The client sends the wait in whole milliseconds, rounded down.
	d := time.Since(start)
	require.GreaterOrEqual(t, d, wait-time.Millisecond, "Get gave up too early")
	require.LessOrEqual(t, d, wait+reportBound, "Get gave up too late")
	// The client still works afterwards.
	require.NoError(t, s.Set(context.Background(), "k", []byte("v")))
}

func TestStoreCancel(t *testing.T) {
	_, dial := newStore(t)
	s := dial()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Cancel the Get while the server holds it, not before it is sent.
		assert.True(t, waitStackOK(serverWaiting), "the server never waited for the key")
		cancel()
	}()
	_, err := s.Get(ctx, "never")
	require.ErrorIs(t, err, context.Canceled, "Get")
	require.NoError(t, s.Set(context.Background(), "k", []byte("v")), "after cancel")
}

// DialStore keeps dialing until the server is up. The port is free when
// the dial starts and served once the dial has failed at least once; if
// another process takes the port in between, the test tries another.
func TestDialStoreRetriesUntilServerUp(t *testing.T) {
	for attempt := 1; ; attempt++ {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		dialed := make(chan error, 1)
		go func() {
			s, err := DialStore(ctx, addr)
			if err == nil {
				s.Close()
			}
			dialed <- err
		}()
		waitStack(t, "DialStore failing or done", func(st string) bool { return len(dialed) > 0 || dialBackingOff(st) })
		var srv *StoreServer
		err := errors.New("the port was served before DialStore tried it")
		if len(dialed) == 0 {
			srv, err = ListenStore(addr)
		}
		if err != nil {
			cancel()
			<-dialed
			require.Less(t, attempt, 5, "attempt %d on %s: %v", attempt, addr, err)
			t.Logf("attempt %d on %s: %v; trying another port", attempt, addr, err)
			continue
		}
		err = <-dialed
		srv.Close()
		cancel()
		require.NoError(t, err)
		return
	}
}

// freePort is a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRendezvousAndAgree runs four ranks as torchrun would start them and
// has rank 2 hold a different config. If another process takes the free
// port before rank 0 serves it, the test tries another.
// It runs once without a job secret and once with one.
func TestRendezvousAndAgree(t *testing.T) {
	for _, secret := range []string{"", string(newSecret(t))} {
		t.Run(fmt.Sprintf("secret=%v", secret != ""), func(t *testing.T) { testRendezvousAndAgree(t, secret) })
	}
}

func testRendezvousAndAgree(t *testing.T, secret string) {
	const n, odd = 4, 2
	for attempt := 1; ; attempt++ {
		errs := rendezvousAndAgree(strconv.Itoa(freePort(t)), n, odd, secret)
		if errors.Is(errs[0], syscall.EADDRINUSE) && attempt < 5 {
			t.Logf("attempt %d: %v; trying another port", attempt, errs[0])
			continue
		}
		for r, err := range errs {
			var ce *Error
			require.ErrorIs(t, err, ErrMismatch, "rank %d", r)
			require.ErrorAs(t, err, &ce, "rank %d", r)
			require.Equal(t, fmt.Sprint([]int{odd}), fmt.Sprint(ce.Ranks), "rank %d: want ErrMismatch naming rank %d", r, odd)
		}
		return
	}
}

// rendezvousAndAgree runs n ranks on port and returns each one's error
// from agreeing on a config that rank odd holds differently, with secret
// as DEEPGO_JOB_SECRET.
func rendezvousAndAgree(port string, n, odd int, secret string) []error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vars := map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": strconv.Itoa(n), "LOCAL_RANK": strconv.Itoa(r),
				"LOCAL_WORLD_SIZE": strconv.Itoa(n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
				"DEEPGO_JOB_SECRET": secret}
			env, err := EnvFrom(func(k string) string { return vars[k] })
			if err != nil {
				errs[r] = err
				return
			}
			store, server, err := Rendezvous(ctx, env)
			if err != nil {
				errs[r] = err
				cancel() // rank 0 could not serve: the others stop dialing
				return
			}
			defer store.Close()
			if err := AgreeOnConfig(ctx, store, r, n, "same", []byte(`{"train_batch_size": 8}`)); err != nil {
				errs[r] = fmt.Errorf("agreeing config: %w", err)
				return
			}
			cfg := `{"train_batch_size": 8}`
			if r == odd {
				cfg = `{"train_batch_size": 16}`
			}
			errs[r] = AgreeOnConfig(ctx, store, r, n, "differs", []byte(cfg))
			// Everyone is done reading before rank 0 stops serving: the
			// last rank to finish says so.
			if v, err := store.Add(ctx, "done", 1); err == nil && v == int64(n) {
				store.Set(ctx, "all done", nil)
			}
			if server != nil {
				store.Get(ctx, "all done")
				server.Close()
			}
		}()
	}
	wg.Wait()
	return errs
}

func TestEnvFrom(t *testing.T) {
	cases := []struct {
		vars map[string]string
		want string
		bad  bool
	}{
		{vars: map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"},
			want: "{3 8 1 2 10.0.0.1 1234 torchrun  {0 0 0 0 0 0s 0s} false}"},
		{vars: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_SIZE": "2"}, // DeepSpeed launcher
			want: "{1 2 1 2 127.0.0.1 29500 torchrun  {0 0 0 0 0 0s 0s} false}"},
		{vars: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
			want: "{1 2 1 2 127.0.0.1 29500 mpirun  {0 0 0 0 0 0s 0s} false}"},
		{vars: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "DEEPGO_JOB_SECRET": "0123456789abcdef0123", "DEEPGO_STORE_MAX_KEYS": "100",
			"DEEPGO_STORE_MAX_BYTES": "4096", "DEEPGO_STORE_IDLE_TIMEOUT": "1m", "DEEPGO_STORE_INSECURE": "1"},
			want: "{0 1 0 1 127.0.0.1 29500 torchrun [redacted] {0 0 100 4096 0 0s 1m0s} true}"},
		{vars: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "DEEPGO_JOB_SECRET": "short"}, bad: true},
		{vars: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "DEEPGO_STORE_MAX_CONNS": "0"}, bad: true},
		{vars: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "DEEPGO_STORE_MAX_BYTES": "1e9"}, bad: true},
		{vars: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "DEEPGO_STORE_HANDSHAKE_TIMEOUT": "10"}, bad: true},
		{vars: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "DEEPGO_STORE_INSECURE": "maybe"}, bad: true},
		{vars: map[string]string{}, bad: true},
		{vars: map[string]string{"RANK": "2", "WORLD_SIZE": "2"}, bad: true},
		{vars: map[string]string{"RANK": "0", "WORLD_SIZE": "x"}, bad: true},
	}
	for _, c := range cases {
		e, err := EnvFrom(func(k string) string { return c.vars[k] })
		if c.bad {
			assert.Error(t, err, "EnvFrom(%v) = %v", c.vars, e)
			for k := range c.vars {
				if strings.HasPrefix(k, "DEEPGO_") {
					assert.ErrorContains(t, err, k, "the error names the variable")
				}
			}
		} else if assert.NoError(t, err, "EnvFrom(%v)", c.vars) {
			assert.Equal(t, c.want, fmt.Sprint(e), "EnvFrom(%v)", c.vars)
		}
	}
}

func TestDefaultTimeout(t *testing.T) {
	cases := []struct{ deepgo, deepspeed, want string }{
		{"", "", "10m0s"}, {"", "30", "30m0s"}, {"90s", "30", "1m30s"}, {"2", "", "2m0s"}, {"-1", "", "error"}, {"", "abc", "error"},
	}
	for _, c := range cases {
		t.Setenv("DEEPGO_TIMEOUT", c.deepgo)
		t.Setenv("DEEPSPEED_TIMEOUT", c.deepspeed)
		d, err := DefaultTimeout()
		got := d.String()
		if err != nil {
			got = "error"
		}
		assert.Equal(t, c.want, got, "DEEPGO_TIMEOUT=%q DEEPSPEED_TIMEOUT=%q", c.deepgo, c.deepspeed)
	}
}

// reportBound is how long past its deadline a call may take to return:
// room for a loaded two-core machine under -race, far below a hang.
const reportBound = 10 * time.Second

// serverWaiting reports whether a goroutine of stacks is a store server
// holding a Get for a key not yet set.
func serverWaiting(stacks string) bool { return blockedIn(stacks, "comm.(*StoreServer).get") }

// dialBackingOff reports whether a goroutine of stacks is DialStore
// waiting to dial again after a failed dial.
func dialBackingOff(stacks string) bool { return blockedIn(stacks, "comm.(*Store).connectLocked") }

// blockedIn reports whether some goroutine of stacks (runtime.Stack of
// all goroutines) is blocked in a select directly in function fn.
func blockedIn(stacks, fn string) bool {
	for _, g := range strings.Split(stacks, "\n\n") {
		lines := strings.Split(g, "\n")
		if !strings.Contains(lines[0], "[select") {
			continue
		}
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "runtime.") {
				continue
			}
			if strings.Contains(l, fn+"(") {
				return true
			}
			break
		}
	}
	return false
}

// waitStackOK polls the stacks of all goroutines until cond holds (true)
// or a minute passes (false). The store tests order their steps with it
// instead of sleeping and hoping the server got there first.
func waitStackOK(cond func(stacks string) bool) bool {
	buf := make([]byte, 1<<20)
	for end := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		n := runtime.Stack(buf, true)
		if n == len(buf) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if cond(string(buf[:n])) {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// waitStack is waitStackOK failing the test when cond never holds.
func waitStack(t *testing.T, what string, cond func(stacks string) bool) {
	t.Helper()
	require.True(t, waitStackOK(cond), "waited a minute for %s", what)
}
