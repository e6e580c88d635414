//go:build gloo

package gloo

/*
#include "gloo_shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"sync"
	"unsafe"
)

// aborter interrupts a descriptor exchange when its context is cancelled:
// Gloo's waits take a deadline but no cancel, so a goroutine that watches
// the context aborts the exchange's waits through a C token. A deadline is
// left to Gloo, whose timeout says which peers never came.
type aborter struct {
	tok  unsafe.Pointer // C token; nil when none could be made
	stop func() bool
	mu   sync.Mutex // a running abort keeps the token alive
}

func newAborter(ctx context.Context) *aborter {
	a := &aborter{tok: C.dg_gloo_abort_new()}
	if a.tok == nil { // out of memory: the exchange then ends at its deadline
		a.stop = func() bool { return false }
		return a
	}
	a.stop = context.AfterFunc(ctx, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.tok != nil && errors.Is(ctx.Err(), context.Canceled) {
			C.dg_gloo_abort(a.tok)
		}
	})
	return a
}

// free stops watching and frees the token once no abort is running.
func (a *aborter) free() {
	a.stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok != nil {
		C.dg_gloo_abort_free(a.tok)
		a.tok = nil
	}
}
