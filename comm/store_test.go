package comm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

func newStore(t *testing.T) (*StoreServer, func() *Store) {
	t.Helper()
	srv, err := ListenStore("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, func() *Store {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := DialStore(ctx, srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
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
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	time.Sleep(20 * time.Millisecond)
	if err := a.Set(ctx, "nccl/unique_id", []byte{0, 1, 2, 255}); err != nil {
		t.Fatal(err)
	}
	if v := <-got; fmt.Sprint(v) != "[0 1 2 255]" {
		t.Fatalf("Get = %v", v)
	}
	for i := 1; i <= 3; i++ {
		n, err := a.Add(ctx, "arrived", 1)
		if err != nil || n != int64(i) {
			t.Fatalf("Add #%d = %d, %v", i, n, err)
		}
	}
	if err := b.Wait(ctx, "arrived", "nccl/unique_id"); err != nil {
		t.Fatal(err)
	}
}

func TestStoreGetTimeout(t *testing.T) {
	_, dial := newStore(t)
	s := dial()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Get(ctx, "never")
	var ce *Error
	if !errors.Is(err, ErrTimeout) || !errors.As(err, &ce) || ce.Op != "Store.Get" {
		t.Fatalf("Get = %v, want a Store.Get *Error wrapping ErrTimeout", err)
	}
	if d := time.Since(start); d > 1200*time.Millisecond {
		t.Fatalf("Get gave up after %v", d)
	}
	// The client still works afterwards.
	if err := s.Set(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}

func TestStoreCancel(t *testing.T) {
	_, dial := newStore(t)
	s := dial()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(30 * time.Millisecond); cancel() }()
	if _, err := s.Get(ctx, "never"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get = %v, want context.Canceled", err)
	}
	if err := s.Set(context.Background(), "k", []byte("v")); err != nil {
		t.Fatalf("after cancel: %v", err)
	}
}

func TestDialStoreRetriesUntilServerUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srvc := make(chan *StoreServer, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		srv, _ := ListenStore(addr)
		srvc <- srv
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := DialStore(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if srv := <-srvc; srv != nil {
		srv.Close()
	}
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRendezvousAndAgree runs four ranks as torchrun would start them and
// has rank 2 hold a different config.
func TestRendezvousAndAgree(t *testing.T) {
	const n, odd = 4, 2
	port := strconv.Itoa(freePort(t))
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vars := map[string]string{"RANK": strconv.Itoa(r), "WORLD_SIZE": strconv.Itoa(n), "LOCAL_RANK": strconv.Itoa(r),
				"LOCAL_WORLD_SIZE": strconv.Itoa(n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
			env, err := EnvFrom(func(k string) string { return vars[k] })
			if err != nil {
				errs[r] = err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			store, server, err := Rendezvous(ctx, env)
			if err != nil {
				errs[r] = err
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
			// Everyone is done reading before rank 0 stops serving.
			if _, err := store.Add(ctx, "done", 1); err == nil && server != nil {
				for {
					v, _ := store.Add(ctx, "done", 0)
					if v == n || ctx.Err() != nil {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				server.Close()
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		var ce *Error
		if !errors.Is(err, ErrMismatch) || !errors.As(err, &ce) || fmt.Sprint(ce.Ranks) != fmt.Sprint([]int{odd}) {
			t.Fatalf("rank %d: %v, want ErrMismatch naming rank %d", r, err, odd)
		}
	}
}

func TestEnvFrom(t *testing.T) {
	cases := []struct {
		vars map[string]string
		want string
		bad  bool
	}{
		{vars: map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"},
			want: "{3 8 1 2 10.0.0.1 1234 torchrun}"},
		{vars: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_SIZE": "2"}, // DeepSpeed launcher
			want: "{1 2 1 2 127.0.0.1 29500 torchrun}"},
		{vars: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
			want: "{1 2 1 2 127.0.0.1 29500 mpirun}"},
		{vars: map[string]string{}, bad: true},
		{vars: map[string]string{"RANK": "2", "WORLD_SIZE": "2"}, bad: true},
		{vars: map[string]string{"RANK": "0", "WORLD_SIZE": "x"}, bad: true},
	}
	for _, c := range cases {
		e, err := EnvFrom(func(k string) string { return c.vars[k] })
		if (err != nil) != c.bad || (!c.bad && fmt.Sprint(e) != c.want) {
			t.Errorf("EnvFrom(%v) = %v, %v; want %s (error %v)", c.vars, e, err, c.want, c.bad)
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
		if got != c.want {
			t.Errorf("DEEPGO_TIMEOUT=%q DEEPSPEED_TIMEOUT=%q: %s, want %s", c.deepgo, c.deepspeed, got, c.want)
		}
	}
}
