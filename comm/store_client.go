package comm

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Store is a client of a StoreServer. Its methods are safe for concurrent
// use (requests are serialized on one connection). Each takes a context: a
// Get waits for its key until the context's deadline (DefaultTimeout when
// it has none). After an I/O error or a cancelled request the connection is
// dropped and the next request dials again. Every connection proves the
// job secret and checks the server's proof before its first request.
type Store struct {
	addr   string
	secret JobSecret
	mu     sync.Mutex
	conn   net.Conn
	rw     *bufio.ReadWriter
}

// DialStore connects to the server at addr without a job secret; it is
// DialStoreOpts(ctx, addr, "").
func DialStore(ctx context.Context, addr string) (*Store, error) {
	return DialStoreOpts(ctx, addr, "")
}

// DialStoreOpts connects to the server at addr and authenticates with
// secret (the job's DEEPGO_JOB_SECRET, Env.Secret), retrying until ctx
// ends while the server is not up yet or at its connection limit. A server
// that refuses the secret, or cannot prove it, fails at once with an
// *Error wrapping ErrRefused.
func DialStoreOpts(ctx context.Context, addr string, secret JobSecret) (*Store, error) {
	s := &Store{addr: addr, secret: secret}
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.connectLocked(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func withDefaultDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	d, err := DefaultTimeout()
	if err != nil {
		d = FallbackTimeout
	}
	return context.WithTimeout(ctx, d)
}

func (s *Store) errorf(op string, err error) error {
	return &Error{Op: "Store." + op, Group: s.addr, Err: err}
}

func (s *Store) connectLocked(ctx context.Context) error {
	var d net.Dialer
	backoff := 10 * time.Millisecond
	var busy error // the last refusal for a limit: the better explanation of a timeout
	for {
		c, err := d.DialContext(ctx, "tcp", s.addr)
		if err == nil {
			if err = s.authenticate(ctx, c); err == nil {
				return nil
			}
			c.Close()
			if errors.Is(err, errStoreBusy) {
				busy = err
			} else if errors.Is(err, ErrRefused) {
				return s.errorf("Dial", fmt.Errorf("store at %s: %w", s.addr, err))
			}
		}
		select {
		case <-ctx.Done():
			if busy != nil {
				return s.errorf("Dial", fmt.Errorf("%w: store at %s kept refusing: %v", ErrTimeout, s.addr, busy))
			}
			return s.errorf("Dial", fmt.Errorf("%w: no store at %s: %w", ErrTimeout, s.addr, err))
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		}
	}
}

// authenticate runs the handshake on c within ctx and keeps c on success.
func (s *Store) authenticate(ctx context.Context, c net.Conn) error {
	// A server that accepts but does not answer is tried again.
	deadline, _ := ctx.Deadline()
	if limit := time.Now().Add(3 * DefaultStoreHandshake); limit.Before(deadline) {
		deadline = limit
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	rw := bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))
	if err := clientHandshake(rw.Reader, rw.Writer, s.secret); err != nil {
		return err
	}
	s.conn, s.rw = c, rw
	return nil
}

func (s *Store) do(ctx context.Context, name string, op byte, key string, val []byte) (byte, []byte, error) {
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	for retried := false; ; retried = true {
		fresh := s.conn == nil
		if fresh {
			if err := s.connectLocked(ctx); err != nil {
				return 0, nil, err
			}
		}
		status, out, answered, err := s.roundTrip(ctx, op, key, val)
		if err == nil {
			return status, out, nil
		}
		s.conn.Close()
		s.conn = nil
		// A kept connection the server dropped while idle: the request was
		// never read, so sending it again on a new one is safe.
		if !fresh && !retried && !answered && ctx.Err() == nil && droppedConn(err) {
			continue
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", ErrAborted, ctx.Err())
		}
		return 0, nil, s.errorf(name, fmt.Errorf("key %q: %w", key, err))
	}
}

// roundTrip sends one request and reads its response; answered says
// whether any of the response arrived.
func (s *Store) roundTrip(ctx context.Context, op byte, key string, val []byte) (status byte, out []byte, answered bool, err error) {
	deadline, _ := ctx.Deadline()
	wait := max(time.Until(deadline), 0)
	c := s.conn
	c.SetDeadline(deadline.Add(time.Second)) // the server answers at the deadline
	stop := context.AfterFunc(ctx, func() {
		if ctx.Err() == context.Canceled {
			c.SetDeadline(time.Now())
		}
	})
	defer stop()
	w := s.rw.Writer
	w.WriteByte(op)
	writeBytes(w, []byte(key))
	writeBytes(w, val)
	var hdr [binary.MaxVarintLen64]byte
	w.Write(hdr[:binary.PutUvarint(hdr[:], uint64(wait/time.Millisecond))])
	if err = w.Flush(); err != nil {
		return 0, nil, false, err
	}
	if status, err = s.rw.ReadByte(); err != nil {
		return 0, nil, false, err
	}
	out, err = readBytes(s.rw.Reader, maxStoreValue, "value")
	return status, out, true, err
}

// droppedConn reports whether err is the peer having closed the connection.
func droppedConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// refused is the error for a storeBad answer.
func (s *Store) refused(op, key string, msg []byte) error {
	return s.errorf(op, fmt.Errorf("%w: key %q: server: %s", ErrRefused, key, msg))
}

// Set stores value under key, replacing any previous value unless the key
// is write-once (SetOnce). A refusal wraps ErrRefused and names the key.
func (s *Store) Set(ctx context.Context, key string, value []byte) error {
	return s.set(ctx, "Set", storeSet, key, value)
}

// SetOnce stores value under key unless the key is already set; the key
// then stays as written for the store's lifetime (one job generation): a
// later Set, SetOnce or Add of it fails with an *Error wrapping ErrRefused
// that names the key. The store's own protocol keys (unique ids, rank
// addresses, config agreement) are written with it, so that nobody
// overwrites them unnoticed.
func (s *Store) SetOnce(ctx context.Context, key string, value []byte) error {
	return s.set(ctx, "SetOnce", storeSetOnce, key, value)
}

func (s *Store) set(ctx context.Context, name string, op byte, key string, value []byte) error {
	if len(value) > maxStoreValue {
		return s.errorf(name, fmt.Errorf("%w: key %q: %d-byte value exceeds %d", ErrInvalid, key, len(value), maxStoreValue))
	}
	if len(key) > maxStoreKey {
		return s.errorf(name, fmt.Errorf("%w: %d-byte key exceeds %d", ErrInvalid, len(key), maxStoreKey))
	}
	st, msg, err := s.do(ctx, name, op, key, value)
	if err != nil {
		return err
	}
	if st != storeOK {
		return s.refused(name, key, msg)
	}
	return nil
}

// Get returns key's value, waiting until some client sets it; at the
// deadline it fails with an error wrapping ErrTimeout.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	st, v, err := s.do(ctx, "Get", storeGet, key, nil)
	switch {
	case err != nil:
		return nil, err
	case st == storeMissing:
		return nil, s.errorf("Get", fmt.Errorf("%w: key %q was not set", ErrTimeout, key))
	case st != storeOK:
		return nil, s.refused("Get", key, v)
	}
	return v, nil
}

// Add adds delta to the integer under key (absent: 0) and returns the new
// value; ranks count arrivals with it.
func (s *Store) Add(ctx context.Context, key string, delta int64) (int64, error) {
	st, v, err := s.do(ctx, "Add", storeAdd, key, []byte(strconv.FormatInt(delta, 10)))
	if err != nil {
		return 0, err
	}
	if st != storeOK {
		return 0, s.refused("Add", key, v)
	}
	return strconv.ParseInt(string(v), 10, 64)
}

// Wait returns once every key is set.
func (s *Store) Wait(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if _, err := s.Get(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// Close drops the connection.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn = nil
	return err
}
