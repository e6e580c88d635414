//go:build gloo

package gloo

/*
#include <stdlib.h>
#include "gloo_shim.h"
*/
import "C"

import (
	"bytes"
	"context"
	"runtime/cgo"
	"time"
	"unsafe"

	"github.com/deepgo-ml/deepgo/comm"
)

// storeView is what Gloo's rendezvous sees of comm.Store: keys under a
// group's prefix, each call under the connect deadline.
type storeView struct {
	ctx    context.Context
	store  *comm.Store
	prefix string
}

func (v *storeView) key(k []byte) string { return v.prefix + "/" + string(k) }

func storeErr(err error, buf *C.char, n C.size_t) C.int {
	if err == nil {
		return 0
	}
	msg := err.Error()
	if int(n) > 0 {
		b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
		b[copy(b[:len(b)-1], msg)] = 0
	}
	return 1
}

func viewOf(h C.uintptr_t) *storeView { return cgo.Handle(h).Value().(*storeView) }

//export dgGlooStoreSet
func dgGlooStoreSet(h C.uintptr_t, key *C.char, klen C.size_t, val *C.char, vlen C.size_t, errBuf *C.char, errLen C.size_t) C.int {
	v := viewOf(h)
	k := C.GoBytes(unsafe.Pointer(key), C.int(klen))
	return storeErr(v.store.Set(v.ctx, v.key(k), C.GoBytes(unsafe.Pointer(val), C.int(vlen))), errBuf, errLen)
}

//export dgGlooStoreGet
func dgGlooStoreGet(h C.uintptr_t, key *C.char, klen C.size_t, val **C.char, vlen *C.size_t, errBuf *C.char, errLen C.size_t) C.int {
	v := viewOf(h)
	k := C.GoBytes(unsafe.Pointer(key), C.int(klen))
	b, err := v.store.Get(v.ctx, v.key(k))
	if err != nil {
		return storeErr(err, errBuf, errLen)
	}
	p := C.malloc(C.size_t(max(len(b), 1)))
	copy(unsafe.Slice((*byte)(p), len(b)), b)
	*val, *vlen = (*C.char)(p), C.size_t(len(b))
	return 0
}

//export dgGlooStoreWait
func dgGlooStoreWait(h C.uintptr_t, keys *C.char, klen C.size_t, timeoutMS C.int64_t, errBuf *C.char, errLen C.size_t) C.int {
	v := viewOf(h)
	ctx := v.ctx
	if timeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMS)*time.Millisecond)
		defer cancel()
	}
	var ks []string
	for _, k := range bytes.Split(C.GoBytes(unsafe.Pointer(keys), C.int(klen)), []byte{0}) {
		if len(k) > 0 {
			ks = append(ks, v.key(k))
		}
	}
	return storeErr(v.store.Wait(ctx, ks...), errBuf, errLen)
}
