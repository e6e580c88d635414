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
	"time"
)

// The store protocol: one request, one response, on a TCP connection.
// Request: op byte, then uvarint-length-prefixed key and value, then the
// wait in milliseconds as a uvarint. Response: status byte, then a
// uvarint-length-prefixed value.
const (
	storeSet byte = iota + 1
	storeGet      // waits up to the given milliseconds for the key
	storeAdd      // value is a decimal delta; returns the new decimal total
)

const (
	storeOK byte = iota
	storeMissing
	storeBad
)

const maxStoreValue = 64 << 20

// StoreServer is the rendezvous key-value server, run by rank 0 on
// MASTER_ADDR:MASTER_PORT (torch's TCPStore role). Values are opaque bytes;
// a Get waits until its key is set.
type StoreServer struct {
	ln      net.Listener
	mu      sync.Mutex
	data    map[string][]byte
	changed chan struct{} // closed and replaced on every change
	conns   map[net.Conn]bool
	closed  chan struct{}
	wg      sync.WaitGroup
}

// ListenStore serves a store on addr ("host:port"; port 0 picks one, see Addr).
func ListenStore(addr string) (*StoreServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("comm.ListenStore: %w", err)
	}
	s := &StoreServer{ln: ln, data: map[string][]byte{}, changed: make(chan struct{}),
		conns: map[net.Conn]bool{}, closed: make(chan struct{})}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address the server listens on.
func (s *StoreServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server and drops its connections; pending Gets fail.
func (s *StoreServer) Close() error {
	select {
	case <-s.closed:
		return nil
	default:
	}
	close(s.closed)
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *StoreServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *StoreServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	for {
		op, err := r.ReadByte()
		if err != nil {
			return
		}
		key, err1 := readBytes(r)
		val, err2 := readBytes(r)
		ms, err3 := binary.ReadUvarint(r)
		if err := errors.Join(err1, err2, err3); err != nil {
			return
		}
		status, out := s.handle(op, string(key), val, time.Duration(ms)*time.Millisecond)
		w.WriteByte(status)
		writeBytes(w, out)
		if w.Flush() != nil {
			return
		}
	}
}

func (s *StoreServer) handle(op byte, key string, val []byte, wait time.Duration) (byte, []byte) {
	switch op {
	case storeSet:
		s.mu.Lock()
		s.data[key] = val
		s.notifyLocked()
		s.mu.Unlock()
		return storeOK, nil
	case storeAdd:
		delta, err := strconv.ParseInt(string(val), 10, 64)
		if err != nil {
			return storeBad, []byte("add: delta is not an integer")
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		cur, _ := strconv.ParseInt(string(s.data[key]), 10, 64)
		total := []byte(strconv.FormatInt(cur+delta, 10))
		s.data[key] = total
		s.notifyLocked()
		return storeOK, total
	case storeGet:
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for {
			s.mu.Lock()
			v, ok := s.data[key]
			ch := s.changed
			s.mu.Unlock()
			if ok {
				return storeOK, v
			}
			select {
			case <-ch:
			case <-timer.C:
				return storeMissing, nil
			case <-s.closed:
				return storeMissing, nil
			}
		}
	}
	return storeBad, []byte("unknown operation")
}

func (s *StoreServer) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func readBytes(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > maxStoreValue {
		return nil, fmt.Errorf("store: %d-byte value exceeds %d", n, maxStoreValue)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}

func writeBytes(w *bufio.Writer, b []byte) {
	var hdr [binary.MaxVarintLen64]byte
	w.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(b)))])
	w.Write(b)
}

// Store is a client of a StoreServer. Its methods are safe for concurrent
// use (requests are serialized on one connection). Each takes a context: a
// Get waits for its key until the context's deadline (DefaultTimeout when
// it has none). After an I/O error or a cancelled request the connection is
// dropped and the next request dials again.
type Store struct {
	addr string
	mu   sync.Mutex
	conn net.Conn
	rw   *bufio.ReadWriter
}

// DialStore connects to the server at addr, retrying until ctx ends (the
// server may not be up yet when other ranks start).
func DialStore(ctx context.Context, addr string) (*Store, error) {
	s := &Store{addr: addr}
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
	for {
		c, err := d.DialContext(ctx, "tcp", s.addr)
		if err == nil {
			s.conn, s.rw = c, bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))
			return nil
		}
		select {
		case <-ctx.Done():
			return s.errorf("Dial", fmt.Errorf("%w: no store at %s: %w", ErrTimeout, s.addr, err))
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		}
	}
}

func (s *Store) do(ctx context.Context, name string, op byte, key string, val []byte) (byte, []byte, error) {
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		if err := s.connectLocked(ctx); err != nil {
			return 0, nil, err
		}
	}
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
	err := w.Flush()
	var status byte
	var out []byte
	if err == nil {
		status, err = s.rw.ReadByte()
	}
	if err == nil {
		out, err = readBytes(s.rw.Reader)
	}
	if err != nil {
		s.conn.Close()
		s.conn = nil
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", ErrAborted, ctx.Err())
		}
		return 0, nil, s.errorf(name, fmt.Errorf("key %q: %w", key, err))
	}
	return status, out, nil
}

// Set stores value under key, replacing any previous value.
func (s *Store) Set(ctx context.Context, key string, value []byte) error {
	if len(value) > maxStoreValue {
		return s.errorf("Set", fmt.Errorf("%w: %d-byte value exceeds %d", ErrInvalid, len(value), maxStoreValue))
	}
	_, _, err := s.do(ctx, "Set", storeSet, key, value)
	return err
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
		return nil, s.errorf("Get", fmt.Errorf("key %q: server: %s", key, v))
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
		return 0, s.errorf("Add", fmt.Errorf("key %q: server: %s", key, v))
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
