package comm

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logSink collects the lines a server logs, for the test to search.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(p))
	l.mu.Unlock()
	return len(p), nil
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "")
}

// newSecret is a job secret as deepgo launch makes one.
func newSecret(t *testing.T) JobSecret {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return JobSecret(hex.EncodeToString(b))
}

// serveStore starts a store with secret and limits, logging to the
// returned buffer.
func serveStore(t *testing.T, secret JobSecret, lim StoreLimits) (*StoreServer, *logSink) {
	t.Helper()
	var log logSink
	srv, err := ListenStoreOpts("127.0.0.1:0", StoreOptions{Secret: secret, Limits: lim, Log: &log})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv, &log
}

// job is a running 2-rank job on a store: each rank has its own client,
// agrees on a config, then loops over store traffic (a shared counter,
// its heartbeat key, the other rank's hash) until stopped.
type job struct {
	rounds atomic.Int64
	stop   chan struct{}
	errs   chan error
}

func startJob(t *testing.T, addr string, secret JobSecret) *job {
	t.Helper()
	j := &job{stop: make(chan struct{}), errs: make(chan error, 2)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	var agreed sync.WaitGroup
	agreed.Add(2)
	for r := range 2 {
		go func() {
			j.errs <- j.rank(ctx, addr, secret, r, &agreed)
		}()
	}
	agreed.Wait()
	return j
}

func (j *job) rank(ctx context.Context, addr string, secret JobSecret, r int, agreed *sync.WaitGroup) error {
	once := sync.OnceFunc(agreed.Done)
	defer once()
	s, err := DialStoreOpts(ctx, addr, secret)
	if err != nil {
		return fmt.Errorf("rank %d: %w", r, err)
	}
	defer s.Close()
	if err := AgreeOnConfig(ctx, s, r, 2, "cfg", []byte(`{"train_batch_size": 8}`)); err != nil {
		return fmt.Errorf("rank %d: %w", r, err)
	}
	beat := fmt.Sprintf("rank/%d/heartbeat", r)
	if err := s.Set(ctx, beat, []byte("0")); err != nil {
		return fmt.Errorf("rank %d: %w", r, err)
	}
	once()
	for i := 1; ; i++ {
		select {
		case <-j.stop:
			return nil
		default:
		}
		if _, err := s.Add(ctx, "tick", 1); err != nil {
			return fmt.Errorf("rank %d round %d: %w", r, i, err)
		}
		if err := s.Set(ctx, beat, fmt.Appendf(nil, "%d", i)); err != nil {
			return fmt.Errorf("rank %d round %d: %w", r, i, err)
		}
		if _, err := s.Get(ctx, fmt.Sprintf("cfg/sha256/%d", 1-r)); err != nil {
			return fmt.Errorf("rank %d round %d: %w", r, i, err)
		}
		j.rounds.Add(1)
	}
}

// finish lets the job run some more rounds, stops it and fails the test if
// a rank failed.
func (j *job) finish(t *testing.T) {
	t.Helper()
	target := j.rounds.Load() + 20
	for end := time.Now().Add(reportBound); j.rounds.Load() < target && time.Now().Before(end) && len(j.errs) == 0; {
		time.Sleep(time.Millisecond)
	}
	close(j.stop)
	for range 2 {
		require.NoError(t, <-j.errs, "the job")
	}
	require.GreaterOrEqual(t, j.rounds.Load(), target, "the job's rounds after the attack")
}

// TestStoreRefusesStrangers: a client without the job's secret is refused
// before any operation, and the refusal is logged with its address, while
// a job on the same store goes on.
func TestStoreRefusesStrangers(t *testing.T) {
	secret := newSecret(t)
	srv, log := serveStore(t, secret, StoreLimits{})
	j := startJob(t, srv.Addr(), secret)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cases := []struct {
		name   string
		secret JobSecret
	}{
		{"missing secret", ""},
		{"wrong secret", newSecret(t)},
		{"secret with a byte changed", secret[:len(secret)-1] + "x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := strings.Count(log.String(), "wrong or missing job secret")
			_, err := DialStoreOpts(ctx, srv.Addr(), c.secret)
			require.ErrorIs(t, err, ErrRefused)
			require.ErrorContains(t, err, "authentication failed")
			require.Eventually(t, func() bool {
				return strings.Count(log.String(), "wrong or missing job secret") == before+1
			}, reportBound, time.Millisecond, "the refusal in the log:\n%s", log.String())
			require.Contains(t, log.String(), "rendezvous store refused 127.0.0.1:")
		})
	}
	// A raw request without the handshake: answered "authenticate first",
	// closed, not executed, logged with the peer's address.
	t.Run("request before hello", func(t *testing.T) {
		c, err := net.Dial("tcp", srv.Addr())
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write(frame(storeSet, "nccl/world/id", "forged", 0))
		require.NoError(t, err)
		c.SetDeadline(time.Now().Add(reportBound))
		r := bufio.NewReader(c)
		st, err := r.ReadByte()
		require.NoError(t, err)
		require.Equal(t, storeBad, st)
		msg, err := readBytes(r, maxStoreMsg, "message")
		require.NoError(t, err)
		require.Contains(t, string(msg), "authenticate first")
		_, err = r.ReadByte()
		require.ErrorIs(t, err, io.EOF, "the server closes the connection")
		require.Eventually(t, func() bool {
			return strings.Contains(log.String(), "refused "+c.LocalAddr().String()+": sent a request before authenticating")
		}, reportBound, time.Millisecond, "log:\n%s", log.String())
		s, err := DialStoreOpts(ctx, srv.Addr(), secret)
		require.NoError(t, err)
		defer s.Close()
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err = s.Get(short, "nccl/world/id")
		require.ErrorIs(t, err, ErrTimeout, "the forged key was not set")
	})
	j.finish(t)
}

// TestStoreClientChecksServer: a store that does not know the secret but
// accepts any proof (an impostor) is found out before the client sends a
// request.
func TestStoreClientChecksServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	after := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			after <- -1
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(reportBound))
		hello := make([]byte, 1+nonceLen)
		io.ReadFull(c, hello)
		c.Write(append([]byte{storeOK}, make([]byte, nonceLen)...))
		io.ReadFull(c, make([]byte, 32)) // the client's proof, unchecked
		c.Write(append([]byte{storeOK}, make([]byte, 32)...))
		rest, _ := io.ReadAll(c) // what the client sends next
		after <- len(rest)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), reportBound)
	defer cancel()
	_, err = DialStoreOpts(ctx, ln.Addr().String(), newSecret(t))
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "did not prove the job secret")
	require.Equal(t, 0, <-after, "bytes the client sent the impostor after the handshake")
}

// TestStoreFlood floods a store past each limit while a 2-rank job runs
// on it: the flood is refused with an error naming the limit, the job
// keeps going.
func TestStoreFlood(t *testing.T) {
	lim := StoreLimits{Conns: 16, Pending: 16, Keys: 100, Bytes: 64 << 10, Waiters: 4, Handshake: time.Second}
	cases := []struct {
		name  string
		flood func(t *testing.T, addr string, secret JobSecret)
	}{
		{"silent connections", func(t *testing.T, addr string, secret JobSecret) {
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range 100 {
				c, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				conns = append(conns, c)
			}
			busy := 0
			for _, c := range conns {
				c.SetReadDeadline(time.Now().Add(reportBound))
				if st, err := bufio.NewReader(c).ReadByte(); err == nil && st == storeBusy {
					busy++
				}
			}
			require.GreaterOrEqual(t, busy, 100-lim.Pending, "connections refused as busy")
			// The silent ones lose their slots at the handshake deadline:
			// a rank joining late gets in.
			ctx, cancel := context.WithTimeout(context.Background(), reportBound)
			defer cancel()
			s, err := DialStoreOpts(ctx, addr, secret)
			require.NoError(t, err, "a late rank")
			s.Close()
		}},
		{"authenticated connections", func(t *testing.T, addr string, secret JobSecret) {
			var opened []*Store
			defer func() {
				for _, s := range opened {
					s.Close()
				}
			}()
			refused := 0
			for range 30 {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				s, err := DialStoreOpts(ctx, addr, secret)
				cancel()
				if err != nil {
					require.ErrorContains(t, err, "DEEPGO_STORE_MAX_CONNS")
					refused++
					continue
				}
				opened = append(opened, s)
			}
			require.Equal(t, lim.Conns-2, len(opened), "connections beside the job's two")
			require.Equal(t, 30-(lim.Conns-2), refused)
		}},
		{"keys", func(t *testing.T, addr string, secret JobSecret) {
			s := dialT(t, addr, secret)
			var err error
			i := 0
			for ; i < 2*lim.Keys && err == nil; i++ {
				err = s.Set(context.Background(), fmt.Sprintf("flood/%d", i), []byte("x"))
			}
			require.ErrorIs(t, err, ErrRefused)
			require.ErrorContains(t, err, fmt.Sprintf("key \"flood/%d\": the store holds its limit of %d keys", i-1, lim.Keys))
		}},
		{"bytes", func(t *testing.T, addr string, secret JobSecret) {
			s := dialT(t, addr, secret)
			err := s.Set(context.Background(), "flood/big", make([]byte, lim.Bytes))
			require.ErrorIs(t, err, ErrRefused)
			require.ErrorContains(t, err, "DEEPGO_STORE_MAX_BYTES")
			require.NoError(t, s.Set(context.Background(), "small", []byte("after a refusal the connection still works")))
		}},
		{"waiting Gets", func(t *testing.T, addr string, secret JobSecret) {
			errs := make(chan error, 10)
			for range 10 {
				go func() {
					s := dialT(t, addr, secret)
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					_, err := s.Get(ctx, "never")
					errs <- err
				}()
			}
			refused := 0
			for range 10 {
				err := <-errs
				if errors.Is(err, ErrRefused) {
					require.ErrorContains(t, err, "DEEPGO_STORE_MAX_WAITERS")
					refused++
				} else {
					require.ErrorIs(t, err, ErrTimeout)
				}
			}
			require.GreaterOrEqual(t, refused, 10-lim.Waiters, "Gets refused")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			secret := newSecret(t)
			srv, _ := serveStore(t, secret, lim)
			j := startJob(t, srv.Addr(), secret)
			c.flood(t, srv.Addr(), secret)
			j.finish(t)
		})
	}
}

// dialT dials addr with secret for the test's lifetime.
func dialT(t *testing.T, addr string, secret JobSecret) *Store {
	ctx, cancel := context.WithTimeout(context.Background(), reportBound)
	defer cancel()
	s, err := DialStoreOpts(ctx, addr, secret)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestStoreWriteOnce: a key written with SetOnce, such as a rank's
// address, cannot be written again; the refusal names the key.
func TestStoreWriteOnce(t *testing.T) {
	secret := newSecret(t)
	srv, _ := serveStore(t, secret, StoreLimits{})
	rank1, other := dialT(t, srv.Addr(), secret), dialT(t, srv.Addr(), secret)
	ctx := context.Background()
	const key = "gloo/world/addr/1"
	require.NoError(t, rank1.SetOnce(ctx, key, []byte("10.0.0.2:41000")))
	cases := []struct {
		name string
		op   func() error
	}{
		{"Set", func() error { return other.Set(ctx, key, []byte("10.6.6.6:41000")) }},
		{"SetOnce", func() error { return other.SetOnce(ctx, key, []byte("10.6.6.6:41000")) }},
		{"Add", func() error { _, err := other.Add(ctx, key, 1); return err }},
		{"SetOnce by the writer", func() error { return rank1.SetOnce(ctx, key, []byte("10.0.0.2:41001")) }},
	}
	for _, c := range cases {
		err := c.op()
		require.ErrorIs(t, err, ErrRefused, c.name)
		require.ErrorContains(t, err, `key "gloo/world/addr/1" is write-once and already set`, c.name)
	}
	v, err := other.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.2:41000", string(v))
	// SetOnce of a key someone set plainly first fails too: the protocol
	// key was taken.
	require.NoError(t, other.Set(ctx, "cfg/sha256/0", []byte("forged")))
	err = AgreeOnConfig(ctx, rank1, 0, 1, "cfg", []byte("{}"))
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, `key "cfg/sha256/0"`)
	// An agreement key used twice in one generation is refused.
	require.NoError(t, AgreeOnConfig(ctx, rank1, 0, 1, "cfg2", []byte("{}")))
	require.ErrorIs(t, AgreeOnConfig(ctx, rank1, 0, 1, "cfg2", []byte("{}")), ErrRefused)
}

// TestListenStoreBind: without a secret the store serves loopback only,
// unless opted out with a warning; every start is logged with its address.
func TestListenStoreBind(t *testing.T) {
	secret := newSecret(t)
	cases := []struct {
		addr     string
		opts     StoreOptions
		wantErr  string
		wantLogs []string
	}{
		{addr: "127.0.0.1:0", wantLogs: []string{"rendezvous store listening on 127.0.0.1:", "(secret: no)"}},
		{addr: "localhost:0", wantLogs: []string{"(secret: no)"}},
		{addr: "0.0.0.0:0", wantErr: "0.0.0.0:0 is not a loopback address and there is no job secret"},
		{addr: ":0", wantErr: "DEEPGO_STORE_INSECURE=1"},
		{addr: "0.0.0.0:0", opts: StoreOptions{AllowInsecure: true}, wantLogs: []string{"WARNING", "has no job secret", "(secret: no)"}},
		{addr: "0.0.0.0:0", opts: StoreOptions{Secret: secret}, wantLogs: []string{"(secret: yes)"}},
	}
	for _, c := range cases {
		var log logSink
		c.opts.Log = &log
		srv, err := ListenStoreOpts(c.addr, c.opts)
		if c.wantErr != "" {
			require.ErrorContains(t, err, c.wantErr, "%s %+v", c.addr, c.opts)
			continue
		}
		require.NoError(t, err, "%s %+v", c.addr, c.opts)
		srv.Close()
		for _, w := range c.wantLogs {
			assert.Contains(t, log.String(), w, "%s %+v", c.addr, c.opts)
		}
		assert.NotContains(t, log.String(), string(secret), "the log shows the secret")
	}
}

// TestStoreMalformedFrames sends broken frames on an authenticated socket:
// the server drops that connection and logs it, and serves the others.
func TestStoreMalformedFrames(t *testing.T) {
	secret := newSecret(t)
	srv, log := serveStore(t, secret, StoreLimits{Bytes: 1 << 20})
	good := dialT(t, srv.Addr(), secret)
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"value length past the protocol's", []byte{storeSet, 1, 'k', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, "exceeds the protocol's"},
		{"varint overflowing 64 bits", []byte{storeSet, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "overflow"},
		{"key past the limit", binary.AppendUvarint([]byte{storeGet}, maxStoreKey+1), "key exceeds"},
		{"truncated frame", frame(storeSet, "k", "a value", 0)[:6], "unexpected EOF"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Addr())
			require.NoError(t, err)
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(reportBound))
			r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
			require.NoError(t, clientHandshake(r, w, secret))
			_, err = conn.Write(c.in)
			require.NoError(t, err)
			if c.name == "truncated frame" {
				conn.(*net.TCPConn).CloseWrite()
			}
			_, err = r.ReadByte()
			require.ErrorIs(t, err, io.EOF, "the server drops the connection")
			require.Eventually(t, func() bool {
				return strings.Contains(log.String(), "dropping "+conn.LocalAddr().String()) && strings.Contains(log.String(), c.want)
			}, reportBound, time.Millisecond, "log:\n%s", log.String())
			require.NoError(t, good.Set(context.Background(), "still/serving", []byte(c.name)))
		})
	}
}

// TestStoreIdleRedial: the server drops an idle connection; the client's
// next request dials again without the caller noticing.
func TestStoreIdleRedial(t *testing.T) {
	secret := newSecret(t)
	srv, _ := serveStore(t, secret, StoreLimits{Idle: 100 * time.Millisecond})
	s := dialT(t, srv.Addr(), secret)
	ctx := context.Background()
	require.NoError(t, s.Set(ctx, "k", []byte("1")))
	time.Sleep(300 * time.Millisecond)
	v, err := s.Get(ctx, "k")
	require.NoError(t, err, "after the idle drop")
	require.Equal(t, "1", string(v))
}
