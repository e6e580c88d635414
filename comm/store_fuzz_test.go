package comm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// fuzzLimits are small, so that the fuzzer reaches them.
var fuzzLimits = StoreLimits{Keys: 8, Bytes: 1 << 10, Waiters: 2}

// frame is one request in the wire format, for the seeds.
func frame(op byte, key, val string, waitMs uint64) []byte {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	w.WriteByte(op)
	writeBytes(w, []byte(key))
	writeBytes(w, []byte(val))
	var hdr [binary.MaxVarintLen64]byte
	w.Write(hdr[:binary.PutUvarint(hdr[:], waitMs)])
	w.Flush()
	return b.Bytes()
}

// FuzzStoreProtocol feeds arbitrary bytes to the server's request parser
// and handler, as an authenticated connection would send them: no input
// may crash it, allocate a key or value beyond the protocol's and the
// store's limits, or grow the store past its limits.
func FuzzStoreProtocol(f *testing.F) {
	huge := binary.AppendUvarint([]byte{storeSet, 1, 'k'}, 1<<62)
	f.Add(frame(storeSet, "nccl/world/id", "0123", 0))
	f.Add(append(frame(storeSetOnce, "a", "1", 0), frame(storeSet, "a", "2", 0)...))
	f.Add(append(frame(storeAdd, "n", "5", 0), frame(storeGet, "n", "", 10)...))
	f.Add(frame(storeAdd, "n", "not a number", 0))
	f.Add(frame(storeSet, "big", string(make([]byte, 2000)), 0))                              // over the byte limit
	f.Add(frame(storeGet, "missing", "", 1<<63))                                              // a wait that overflows a Duration
	f.Add(frame(9, "k", "v", 0))                                                              // unknown op
	f.Add(huge)                                                                               // a value length past the protocol's
	f.Add([]byte{storeSet, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}) // a varint overflowing 64 bits
	f.Add(frame(storeSet, "k", "value", 0)[:6])                                               // truncated
	f.Fuzz(func(t *testing.T, in []byte) {
		s := newStoreServer(StoreOptions{Limits: fuzzLimits, Log: io.Discard})
		r := bufio.NewReader(bytes.NewReader(in))
		for {
			left := s.bytesLeft()
			req, err := readRequest(r, left)
			if err != nil {
				return
			}
			if len(req.key) > maxStoreKey || int64(len(req.val)) > max(left, 0) {
				t.Fatalf("parsed a %d-byte key and %d-byte value with %d bytes left", len(req.key), len(req.val), left)
			}
			req.wait = 0 // nothing else sets keys: a Get would only wait
			st, out := s.handle(req)
			if st == storeBad && len(out) == 0 {
				t.Fatalf("op %d on key %q refused without a message", req.op, req.key)
			}
			if len(s.data) > fuzzLimits.Keys || s.bytes > fuzzLimits.Bytes {
				t.Fatalf("the store grew to %d keys and %d bytes, past %+v", len(s.data), s.bytes, fuzzLimits)
			}
		}
	})
}

// FuzzStoreHandshake feeds arbitrary bytes to the server's side of the
// handshake: without the secret no input authenticates, and none crashes
// it.
func FuzzStoreHandshake(f *testing.F) {
	hello := append([]byte{storeHello}, make([]byte, nonceLen)...)
	f.Add(hello)
	f.Add(append(hello, make([]byte, 32)...))
	f.Add(frame(storeSet, "nccl/world/id", "x", 0))
	f.Add([]byte{})
	f.Add(hello[:10])
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		err := serverHandshake(bufio.NewReader(bytes.NewReader(in)), bufio.NewWriter(&out), "fuzz secret 0123456789", func() string { return "" })
		if err == nil {
			t.Fatalf("%x authenticated without the secret", in)
		}
		if len(in) > 0 && in[0] != storeHello && !errors.Is(err, errNoHello) {
			t.Fatalf("first byte %d: want errNoHello, got %v", in[0], err)
		}
	})
}
