package staged

import (
	"fmt"
	"sync"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// staging is one operation's host side: the tensors handed to the inner
// comm (in args order) and the buffers lent for them.
type staging struct {
	hs   []*tensor.Tensor
	bufs []*tensor.Storage
}

// check says why the device cannot move a, or nil for a device tensor it
// can. Nil and host tensors never reach it.
func (c *Comm) check(a comm.Arg) error {
	t := a.T
	switch {
	case t.Device() != c.be.Device():
		return fmt.Errorf("%w: %s %v is neither in host memory nor on %v", comm.ErrInvalid, a.Name, t, c.be.Device())
	case !t.Contiguous():
		return fmt.Errorf("%w: %s %v is not contiguous", comm.ErrInvalid, a.Name, t)
	case t.Storage().Freed():
		return fmt.Errorf("%w: %s %v: storage already freed", comm.ErrInvalid, a.Name, t)
	}
	return nil
}

// stageIn lends host buffers for the device arguments and copies the
// inputs into them. Arguments viewing one device storage share one buffer
// at the same relative offsets, so the inner comm sees the same overlap
// (an in-place ReduceScatter or AllGather, or a forbidden one) as the
// caller made. Nil and host tensors pass through as they are.
func (c *Comm) stageIn(args []comm.Arg) (*staging, error) {
	st := &staging{hs: make([]*tensor.Tensor, len(args))}
	type span struct{ lo, hi int }
	spans := map[*tensor.Storage]*span{}
	var order []*tensor.Storage
	for i, a := range args {
		if a.T == nil || a.T.Device().IsCPU() {
			st.hs[i] = a.T
			continue
		}
		if err := c.check(a); err != nil {
			return st, err
		}
		s := a.T.Storage()
		lo := a.T.Offset() * a.T.DType().Size()
		hi := lo + a.T.Bytes()
		if sp, ok := spans[s]; ok {
			sp.lo, sp.hi = min(sp.lo, lo), max(sp.hi, hi)
			continue
		}
		spans[s] = &span{lo, hi}
		order = append(order, s)
	}
	bufs := map[*tensor.Storage]*tensor.Storage{}
	for _, s := range order {
		b, err := c.cache.get(spans[s].hi - spans[s].lo)
		if err != nil {
			return st, fmt.Errorf("%w: staging buffer: %w", comm.ErrInvalid, err)
		}
		st.bufs = append(st.bufs, b)
		bufs[s] = b
	}
	for i, a := range args {
		if a.T == nil || a.T.Device().IsCPU() {
			continue
		}
		b := bufs[a.T.Storage()]
		sz := a.T.DType().Size()
		rel := a.T.Offset()*sz - spans[a.T.Storage()].lo
		if rel%sz != 0 {
			return st, fmt.Errorf("%w: %s %v starts at byte %d of the span its storage shares with another argument, not a multiple of its %d-byte elements",
				comm.ErrInvalid, a.Name, a.T, rel, sz)
		}
		h, err := tensor.FromStorage(b, a.T.DType(), rel/sz, a.T.Shape()...)
		if err != nil {
			return st, fmt.Errorf("%w: %s %v: %w", comm.ErrInvalid, a.Name, a.T, err)
		}
		st.hs[i] = h
	}
	for i, a := range args {
		if !a.In || st.hs[i] == a.T {
			continue
		}
		if err := c.be.Copy(st.hs[i], a.T); err != nil {
			return st, fmt.Errorf("%w: copying %s %v to the host: %w", comm.ErrInvalid, a.Name, a.T, err)
		}
	}
	return st, nil
}

// stageOut copies the outputs back to the device.
func (c *Comm) stageOut(args []comm.Arg, st *staging) error {
	for i, a := range args {
		if !a.Out || st.hs[i] == a.T {
			continue
		}
		if err := c.be.Copy(a.T, st.hs[i]); err != nil {
			return fmt.Errorf("%w: copying %s %v back from the host: %w", comm.ErrInvalid, a.Name, a.T, err)
		}
	}
	return nil
}

// release returns the buffers to the cache.
func (c *Comm) release(st *staging) {
	for _, b := range st.bufs {
		c.cache.put(b)
	}
}

// cacheCap bounds the buffers a comm keeps between calls: enough for a
// few operations in flight (a bucketed all-reduce), without holding
// every size an engine ever used.
const cacheCap = 8

// cache keeps host staging buffers between calls, by size in bytes (the
// dtype does not matter to a buffer: views give it one).
type cache struct {
	mu     sync.Mutex
	free   map[int][]*tensor.Storage
	n      int
	closed bool
}

// get lends a buffer of exactly nbytes, reused or new.
func (k *cache) get(nbytes int) (*tensor.Storage, error) {
	k.mu.Lock()
	if l := k.free[nbytes]; len(l) > 0 {
		b := l[len(l)-1]
		k.free[nbytes] = l[:len(l)-1]
		k.n--
		k.mu.Unlock()
		return b, nil
	}
	k.mu.Unlock()
	return tensor.NewHostStorage(nbytes, tensor.HostAlign)
}

// put takes a buffer back, or frees it when the cache is full or closed.
func (k *cache) put(b *tensor.Storage) {
	k.mu.Lock()
	if k.closed || k.n >= cacheCap {
		k.mu.Unlock()
		b.Free()
		return
	}
	if k.free == nil {
		k.free = map[int][]*tensor.Storage{}
	}
	k.free[b.Bytes()] = append(k.free[b.Bytes()], b)
	k.n++
	k.mu.Unlock()
}

// close frees every kept buffer; later puts free theirs.
func (k *cache) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	for _, l := range k.free {
		for _, b := range l {
			b.Free()
		}
	}
	k.free, k.n = nil, 0
}

// size is the number of buffers kept (for tests).
func (k *cache) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n
}
