package comm

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// The store protocol, on one TCP connection.
//
// Handshake, before anything else (the server closes a connection whose
// first frame is not a hello):
//
//	client: storeHello, 32-byte client nonce
//	server: storeOK, 32-byte server nonce   (or storeBusy/storeBad, message)
//	client: HMAC(secret, storeProtocol, "client", cnonce, snonce)
//	server: storeOK, HMAC(secret, storeProtocol, "server", cnonce, snonce)
//	        (or storeBad, message, and the connection closes)
//
// The client sends no request until the server's proof checks out, so a
// rank never hands its keys to a store that does not know the secret. The
// two proofs carry different labels, so neither can be replayed as the
// other; fresh nonces on both sides keep an old exchange from replaying.
//
// Then request, response, request, ...: a request is an op byte, a
// uvarint-length-prefixed key and value, then the wait in milliseconds as a
// uvarint; a response is a status byte and a uvarint-length-prefixed value
// (the error message when the status is storeBad).
const (
	storeSet     byte = iota + 1
	storeGet          // waits up to the given milliseconds for the key
	storeAdd          // value is a decimal delta; returns the new decimal total
	storeSetOnce      // fails when the key exists; the key is then write-once
	storeHello   byte = 0x7f
)

const (
	storeOK byte = iota
	storeMissing
	storeBad
	storeBusy // a connection limit: try again later
)

// storeProtocol labels the handshake's proofs: a client of another protocol
// version fails to authenticate instead of misreading frames.
const storeProtocol = "deepgo-store/1"

const (
	nonceLen      = 32
	maxStoreValue = 64 << 20
	maxStoreKey   = 4 << 10
	// maxStoreMsg bounds an error message a client reads before it has
	// authenticated the server.
	maxStoreMsg = 4 << 10
	// maxWaitMs keeps a request's wait from overflowing a time.Duration.
	maxWaitMs = math.MaxInt64 / int64(time.Millisecond)
)

// storeRequest is one parsed request. refused is set (and val nil) when the
// value was larger than the bytes the store has left: its bytes were read
// and dropped so that the connection stays usable, and the server answers
// storeBad.
type storeRequest struct {
	op      byte
	key     string
	val     []byte
	wait    time.Duration
	refused string
}

// readRequest parses one request from r. A value longer than maxVal (the
// store's remaining byte budget) is skipped, not allocated; a key over
// maxStoreKey or a value over maxStoreValue breaks the protocol and is an
// error, as is a truncated frame. A clean end of input before the op byte
// is io.EOF.
func readRequest(r *bufio.Reader, maxVal int64) (storeRequest, error) {
	var req storeRequest
	op, err := r.ReadByte()
	if err != nil {
		return req, err
	}
	req.op = op
	key, err := readBytes(r, maxStoreKey, "key")
	if err != nil {
		return req, unexpected(err)
	}
	req.key = string(key)
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return req, fmt.Errorf("value length: %w", unexpected(err))
	}
	switch {
	case n > maxStoreValue:
		return req, fmt.Errorf("key %q: %d-byte value exceeds the protocol's %d", req.key, n, maxStoreValue)
	case int64(n) > maxVal:
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			return req, fmt.Errorf("key %q: value: %w", req.key, unexpected(err))
		}
		req.refused = fmt.Sprintf("key %q: %d-byte value exceeds the %d bytes the store has left (DEEPGO_STORE_MAX_BYTES)", req.key, n, max(maxVal, 0))
	default:
		if req.val, err = readN(r, n); err != nil {
			return req, fmt.Errorf("key %q: value: %w", req.key, unexpected(err))
		}
	}
	ms, err := binary.ReadUvarint(r)
	if err != nil {
		return req, fmt.Errorf("key %q: wait: %w", req.key, unexpected(err))
	}
	req.wait = time.Duration(min(ms, uint64(maxWaitMs))) * time.Millisecond
	return req, nil
}

// unexpected turns an end of input inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readBytes reads a uvarint length, at most limit, and that many bytes.
func readBytes(r *bufio.Reader, limit uint64, what string) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, fmt.Errorf("%s length: %w", what, err)
	}
	if n > limit {
		return nil, fmt.Errorf("%d-byte %s exceeds %d", n, what, limit)
	}
	b, err := readN(r, n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}

// readN reads n bytes, growing the buffer as they arrive: a frame that
// announces a large value and stops short costs what it sent, not what it
// announced.
func readN(r io.Reader, n uint64) ([]byte, error) {
	const chunk = 64 << 10
	if n <= chunk {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	var buf bytes.Buffer
	buf.Grow(chunk)
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeBytes(w *bufio.Writer, b []byte) {
	var hdr [binary.MaxVarintLen64]byte
	w.Write(hdr[:binary.PutUvarint(hdr[:], uint64(len(b)))])
	w.Write(b)
}

// writeStatus writes a response with no value or with a message.
func writeStatus(w *bufio.Writer, status byte, msg string) error {
	w.WriteByte(status)
	writeBytes(w, []byte(msg))
	return w.Flush()
}

// storeMAC is one side's proof of the secret over both nonces.
func storeMAC(secret JobSecret, side string, cnonce, snonce []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(storeProtocol))
	m.Write([]byte{0})
	m.Write([]byte(side))
	m.Write([]byte{0})
	m.Write(cnonce)
	m.Write(snonce)
	return m.Sum(nil)
}

// errNoHello: the first frame on a connection was not a hello.
var errNoHello = errors.New("sent a request before authenticating")

// serverHandshake is the server's side of the handshake: nil once the
// client has proven secret and admit, asked then, has let it in (admit
// returns "" or why the client must come back later). On failure it tells
// the client why (best effort) and returns the reason to log.
func serverHandshake(r *bufio.Reader, w *bufio.Writer, secret JobSecret, admit func() string) error {
	op, err := r.ReadByte()
	if err != nil {
		return fmt.Errorf("no hello: %w", err)
	}
	if op != storeHello {
		writeStatus(w, storeBad, "authenticate first: this store needs the job's secret (DEEPGO_JOB_SECRET)")
		return fmt.Errorf("%w (op %d)", errNoHello, op)
	}
	cn := make([]byte, nonceLen)
	if _, err := io.ReadFull(r, cn); err != nil {
		return fmt.Errorf("hello: %w", unexpected(err))
	}
	sn := make([]byte, nonceLen)
	rand.Read(sn)
	w.WriteByte(storeOK)
	w.Write(sn)
	if err := w.Flush(); err != nil {
		return fmt.Errorf("sending the challenge: %w", err)
	}
	proof := make([]byte, sha256.Size)
	if _, err := io.ReadFull(r, proof); err != nil {
		return fmt.Errorf("no proof: %w", unexpected(err))
	}
	if !hmac.Equal(proof, storeMAC(secret, "client", cn, sn)) {
		writeStatus(w, storeBad, "authentication failed: wrong or missing job secret (DEEPGO_JOB_SECRET)")
		return errors.New("wrong or missing job secret")
	}
	if why := admit(); why != "" {
		writeStatus(w, storeBusy, "store busy: "+why)
		return errors.New(why)
	}
	w.WriteByte(storeOK)
	w.Write(storeMAC(secret, "server", cn, sn))
	if err := w.Flush(); err != nil {
		return fmt.Errorf("sending the proof: %w", err)
	}
	return nil
}

// errStoreBusy marks a refusal for a connection limit: worth retrying.
var errStoreBusy = errors.New("store busy")

// clientHandshake is the client's side: nil once the server has proven
// secret. A refusal wraps ErrRefused (and errStoreBusy when retrying may
// help).
func clientHandshake(r *bufio.Reader, w *bufio.Writer, secret JobSecret) error {
	cn := make([]byte, nonceLen)
	rand.Read(cn)
	w.WriteByte(storeHello)
	w.Write(cn)
	if err := w.Flush(); err != nil {
		return err
	}
	sn, err := readStatus(r, nonceLen)
	if err != nil {
		return err
	}
	w.Write(storeMAC(secret, "client", cn, sn))
	if err := w.Flush(); err != nil {
		return err
	}
	proof, err := readStatus(r, sha256.Size)
	if err != nil {
		return err
	}
	if !hmac.Equal(proof, storeMAC(secret, "server", cn, sn)) {
		return fmt.Errorf("%w: the server did not prove the job secret (another job's store, or not a deepgo store)", ErrRefused)
	}
	return nil
}

// readStatus reads a handshake reply: storeOK and n bytes, or a refusal
// and its message.
func readStatus(r *bufio.Reader, n int) ([]byte, error) {
	st, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	if st != storeOK {
		msg, err := readBytes(r, maxStoreMsg, "message")
		if err != nil {
			return nil, fmt.Errorf("%w: status %d (%w)", ErrRefused, st, err)
		}
		if st == storeBusy {
			return nil, fmt.Errorf("%w: %w: %s", ErrRefused, errStoreBusy, msg)
		}
		return nil, fmt.Errorf("%w: %s", ErrRefused, msg)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, unexpected(err)
}
