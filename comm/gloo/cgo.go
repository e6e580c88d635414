//go:build gloo

package gloo

/*
#cgo CXXFLAGS: -std=c++17 -O2
#cgo LDFLAGS: -lgloo -lstdc++
#include <stdlib.h>
#include "gloo_shim.h"
*/
import "C"

import (
	"fmt"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/deepgo-ml/deepgo/comm"
)

// Available reports whether this build has Gloo.
func Available() bool { return true }

const errBufLen = 1024

// shimFail is a failed shim call: its status and Gloo's message.
type shimFail struct {
	code int
	msg  string
}

func (f *shimFail) Error() string { return "gloo: " + f.msg }

// sentinel is the comm error a status maps to: Gloo's own deadline is
// ErrTimeout, a failed connection or anything else ErrAborted.
func (f *shimFail) sentinel() error {
	if f.code == C.DG_GLOO_TIMEOUT {
		return comm.ErrTimeout
	}
	return comm.ErrAborted
}

// shim runs one shim call with an error buffer.
func shim(f func(err *C.char, n C.size_t) C.int) *shimFail {
	var buf [errBufLen]C.char
	if rc := f(&buf[0], errBufLen); rc != C.DG_GLOO_OK {
		return &shimFail{code: int(rc), msg: C.GoString(&buf[0])}
	}
	return nil
}

// millis rounds up, so that Gloo never gives up before the deadline.
func millis(d time.Duration) C.int64_t {
	return C.int64_t(max((d+time.Millisecond-1)/time.Millisecond, 1))
}

func cstr(s string) (*C.char, func()) {
	p := C.CString(s)
	return p, func() { C.free(unsafe.Pointer(p)) }
}

// device is Gloo's TCP transport of a world and the groups split from it.
type device struct {
	p unsafe.Pointer
}

// ignoreSIGPIPE: Gloo writes to its sockets from its own threads, where a
// peer that died raises SIGPIPE, which would kill this process (Go
// forwards it to the default action on non-Go threads) instead of failing
// the write with EPIPE. Go code writing to a broken pipe gets EPIPE anyway.
var ignoreSIGPIPE sync.Once

func openDevice(opts Options) (*device, error) {
	ignoreSIGPIPE.Do(func() { signal.Ignore(syscall.SIGPIPE) })
	host, freeHost := cstr(opts.Hostname)
	defer freeHost()
	iface, freeIface := cstr(opts.Iface)
	defer freeIface()
	d := &device{}
	if f := shim(func(e *C.char, n C.size_t) C.int { return C.dg_gloo_device(host, iface, &d.p, e, n) }); f != nil {
		return nil, fmt.Errorf("open Gloo's TCP device (hostname %q, iface %q): %w", opts.Hostname, opts.Iface, f)
	}
	return d, nil
}
