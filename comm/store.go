package comm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// StoreServer is the rendezvous key-value server, run by rank 0 on
// MASTER_ADDR:MASTER_PORT (torch's TCPStore role). Values are opaque bytes;
// a Get waits until its key is set.
//
// Every connection first proves the job secret (see StoreOptions); its
// resources are bounded by StoreLimits. One server lifetime is one job
// generation: keys written with SetOnce cannot be written again until the
// server is replaced (the launcher starts a fresh store when it restarts
// the job).
type StoreServer struct {
	ln     net.Listener
	secret JobSecret
	lim    StoreLimits
	log    *log.Logger
	refuse refusalLog

	mu      sync.Mutex
	data    map[string][]byte
	once    map[string]bool // write-once keys
	bytes   int64           // key and value bytes in data
	waiters int
	changed chan struct{} // closed and replaced on every change
	conns   map[net.Conn]bool
	authed  int // connections past the handshake
	pending int // connections in the handshake

	closed chan struct{}
	wg     sync.WaitGroup
}

// ListenStore serves a store without a job secret on addr ("host:port";
// port 0 picks one, see Addr), with the default limits, logging to
// os.Stderr. Without a secret only a loopback address is allowed: it is
// ListenStoreOpts(addr, StoreOptions{}).
func ListenStore(addr string) (*StoreServer, error) {
	return ListenStoreOpts(addr, StoreOptions{})
}

// ListenStoreOpts serves a store on addr, which it binds as given: a host
// of "" or 0.0.0.0 listens on every interface, and only when written so.
// Without opts.Secret a non-loopback address is refused unless
// opts.AllowInsecure, which logs a warning. The listening address is
// logged.
func ListenStoreOpts(addr string, opts StoreOptions) (*StoreServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("comm.ListenStore: %w", err)
	}
	s := newStoreServer(opts)
	s.ln = ln
	loopback := false
	if ta, ok := ln.Addr().(*net.TCPAddr); ok {
		loopback = ta.IP.IsLoopback()
	}
	if opts.Secret == "" && !loopback {
		if !opts.AllowInsecure {
			ln.Close()
			return nil, fmt.Errorf("comm.ListenStore: %s is not a loopback address and there is no job secret: set DEEPGO_JOB_SECRET on every rank (deepgo launch does), or DEEPGO_STORE_INSECURE=1 to serve it to anyone who can reach it", addr)
		}
		s.log.Printf("deepgo: WARNING: rendezvous store on %s has no job secret (DEEPGO_STORE_INSECURE): anyone who reaches it can join the job and read or write its keys", s.Addr())
	}
	yes := map[bool]string{true: "yes", false: "no"}
	s.log.Printf("deepgo: rendezvous store listening on %s (secret: %s)", s.Addr(), yes[opts.Secret != ""])
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// newStoreServer is a server with no listener yet (the fuzz tests drive
// its handler directly).
func newStoreServer(opts StoreOptions) *StoreServer {
	w := opts.Log
	if w == nil {
		w = os.Stderr
	}
	return &StoreServer{secret: opts.Secret, lim: opts.Limits.withDefaults(), log: log.New(w, "", log.LstdFlags),
		data: map[string][]byte{}, once: map[string]bool{}, changed: make(chan struct{}),
		conns: map[net.Conn]bool{}, closed: make(chan struct{})}
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
		full := s.pending >= s.lim.Pending
		if !full {
			s.pending++
			s.conns[c] = true
		}
		s.mu.Unlock()
		if full {
			s.refuseConn(c, fmt.Sprintf("%d connections are authenticating (DEEPGO_STORE_MAX_PENDING)", s.lim.Pending))
			continue
		}
		s.wg.Add(1)
		go s.serve(c)
	}
}

// refuseConn tells c why it is refused (best effort, without waiting on
// it), logs it and closes it.
func (s *StoreServer) refuseConn(c net.Conn, why string) {
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	writeStatus(bufio.NewWriter(c), storeBusy, "store busy: "+why)
	c.Close()
	s.refuse.printf(s.log, c.RemoteAddr(), why)
}

func (s *StoreServer) serve(c net.Conn) {
	defer s.wg.Done()
	authed := false
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		if authed {
			s.authed--
		} else {
			s.pending--
		}
		s.mu.Unlock()
		c.Close()
	}()
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	// A connection that stays silent loses its slot at the deadline.
	c.SetDeadline(time.Now().Add(s.lim.Handshake))
	admit := func() string {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.authed >= s.lim.Conns {
			return fmt.Sprintf("%d connections are open (DEEPGO_STORE_MAX_CONNS)", s.lim.Conns)
		}
		s.pending--
		s.authed++
		authed = true
		return ""
	}
	if err := serverHandshake(r, w, s.secret, admit); err != nil {
		if !s.isClosed() {
			s.refuse.printf(s.log, c.RemoteAddr(), err.Error())
		}
		return
	}
	c.SetDeadline(time.Time{})
	for {
		if s.lim.Idle > 0 {
			c.SetReadDeadline(time.Now().Add(s.lim.Idle))
		}
		req, err := readRequest(r, s.bytesLeft())
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && !s.isClosed() {
				s.log.Printf("deepgo: rendezvous store: dropping %s: %v", c.RemoteAddr(), err)
			}
			return
		}
		status, out := s.handle(req)
		w.WriteByte(status)
		writeBytes(w, out)
		if w.Flush() != nil {
			return
		}
	}
}

func (s *StoreServer) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// bytesLeft is how many more key and value bytes the store may hold.
func (s *StoreServer) bytesLeft() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lim.Bytes - s.bytes
}

func (s *StoreServer) handle(req storeRequest) (byte, []byte) {
	bad := func(format string, a ...any) (byte, []byte) { return storeBad, fmt.Appendf(nil, format, a...) }
	if req.refused != "" {
		return storeBad, []byte(req.refused)
	}
	key := req.key
	switch req.op {
	case storeSet, storeSetOnce:
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.data[key]; ok && s.once[key] {
			return bad("key %q is write-once and already set in this store generation", key)
		} else if ok && req.op == storeSetOnce {
			return bad("key %q is already set in this store generation (SetOnce writes a key only if it is absent)", key)
		}
		if err := s.putLocked(key, req.val); err != nil {
			return bad("%v", err)
		}
		if req.op == storeSetOnce {
			s.once[key] = true
		}
		return storeOK, nil
	case storeAdd:
		delta, err := strconv.ParseInt(string(req.val), 10, 64)
		if err != nil {
			return bad("add: delta is not an integer")
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.once[key] {
			return bad("key %q is write-once and already set in this store generation", key)
		}
		cur, _ := strconv.ParseInt(string(s.data[key]), 10, 64)
		total := []byte(strconv.FormatInt(cur+delta, 10))
		if err := s.putLocked(key, total); err != nil {
			return bad("%v", err)
		}
		return storeOK, total
	case storeGet:
		return s.get(key, req.wait)
	}
	return bad("unknown operation %d", req.op)
}

// putLocked stores val under key within the key and byte limits.
func (s *StoreServer) putLocked(key string, val []byte) error {
	old, exists := s.data[key]
	grow := int64(len(val)) - int64(len(old))
	if !exists {
		if len(s.data) >= s.lim.Keys {
			return fmt.Errorf("key %q: the store holds its limit of %d keys (DEEPGO_STORE_MAX_KEYS)", key, s.lim.Keys)
		}
		grow += int64(len(key))
	}
	if s.bytes+grow > s.lim.Bytes {
		return fmt.Errorf("key %q: %d more bytes exceed the store's limit of %d (DEEPGO_STORE_MAX_BYTES)", key, grow, s.lim.Bytes)
	}
	s.data[key] = val
	s.bytes += grow
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// get answers a Get: the value, or storeMissing once wait has passed
// without the key being set.
func (s *StoreServer) get(key string, wait time.Duration) (byte, []byte) {
	s.mu.Lock()
	v, ok := s.data[key]
	if ok {
		s.mu.Unlock()
		return storeOK, v
	}
	if s.waiters >= s.lim.Waiters {
		s.mu.Unlock()
		return storeBad, fmt.Appendf(nil, "key %q: %d Gets are waiting already (DEEPGO_STORE_MAX_WAITERS)", key, s.lim.Waiters)
	}
	s.waiters++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.waiters--
		s.mu.Unlock()
	}()
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

// refusalLog logs refused connections, at most refusalBurst a second, so
// that a flood cannot flood the log too; the next line says how many were
// left out.
type refusalLog struct {
	mu      sync.Mutex
	second  int64
	n       int
	skipped int
}

const refusalBurst = 20

func (l *refusalLog) printf(lg *log.Logger, peer net.Addr, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now().Unix(); now != l.second {
		l.second, l.n = now, 0
	}
	if l.n >= refusalBurst {
		l.skipped++
		return
	}
	l.n++
	more := ""
	if l.skipped > 0 {
		more = fmt.Sprintf(" (and %d more refusals not logged)", l.skipped)
		l.skipped = 0
	}
	lg.Printf("deepgo: rendezvous store refused %s: %s%s", peer, why, more)
}
