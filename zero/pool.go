package zero

import (
	"sync"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Category is what a block of engine memory is for.
type Category int

// Memory categories.
const (
	CatParams    Category = iota // resident model parameters (full, or the stage-3 shard)
	CatMaster                    // fp32 master weights
	CatGrads                     // gradients kept across micro-steps
	CatBuckets                   // gradient buckets and communication staging
	CatGathered                  // stage-3 gathered parameters
	CatSecondary                 // stage-3 hpZ secondary partitions
	numCats
)

// accountant tracks bytes by category and the peak of their sum.
type accountant struct {
	mu       sync.Mutex
	cur      [numCats]int64
	peak     [numCats]int64
	params   map[tensor.DType]int64
	total    int64
	totalMax int64
	host     int64 // live bytes in host memory
	device   int64 // live bytes on the backend's device
}

func newAccountant() *accountant { return &accountant{params: map[tensor.DType]int64{}} }

func (a *accountant) add(c Category, dt tensor.DType, n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cur[c] += n
	a.peak[c] = max(a.peak[c], a.cur[c])
	if c == CatParams {
		a.params[dt] += n
	}
	a.total += n
	a.totalMax = max(a.totalMax, a.total)
}

// place books n bytes (negative: freed) of t's memory as host or device.
func (a *accountant) place(t *tensor.Tensor, n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.Device().IsCPU() {
		a.host += n
	} else {
		a.device += n
	}
}

// alloc allocates a zeroed tensor on be and books it under c.
func (a *accountant) alloc(be backend.Backend, c Category, dt tensor.DType, n int) (*tensor.Tensor, error) {
	t, err := be.Empty(dt, n)
	if err != nil {
		return nil, err
	}
	a.add(c, dt, int64(t.Bytes()))
	a.place(t, int64(t.Bytes()))
	return t, nil
}

func (a *accountant) free(c Category, t *tensor.Tensor) {
	if t == nil {
		return
	}
	a.add(c, t.DType(), -int64(t.Bytes()))
	a.place(t, -int64(t.Bytes()))
	t.Free()
}

// pool hands out zeroed 1-D buffers of one category, keeping up to
// maxCached bytes of returned buffers for reuse (exact dtype and size).
type pool struct {
	be        backend.Backend
	acct      *accountant
	cat       Category
	maxCached int64
	cached    int64
	free      map[poolKey][]*tensor.Tensor
}

type poolKey struct {
	dt tensor.DType
	n  int
}

func newPool(be backend.Backend, acct *accountant, cat Category, maxCached int64) *pool {
	return &pool{be: be, acct: acct, cat: cat, maxCached: maxCached, free: map[poolKey][]*tensor.Tensor{}}
}

func (p *pool) get(dt tensor.DType, n int) (*tensor.Tensor, error) {
	k := poolKey{dt, n}
	if l := p.free[k]; len(l) > 0 {
		t := l[len(l)-1]
		p.free[k] = l[:len(l)-1]
		p.cached -= int64(t.Bytes())
		if err := p.be.Zero([]*tensor.Tensor{t}); err != nil {
			return nil, err
		}
		return t, nil
	}
	return p.acct.alloc(p.be, p.cat, dt, n)
}

func (p *pool) put(t *tensor.Tensor) {
	if t == nil {
		return
	}
	if p.cached+int64(t.Bytes()) > p.maxCached {
		p.acct.free(p.cat, t)
		return
	}
	k := poolKey{t.DType(), t.Numel()}
	p.free[k] = append(p.free[k], t)
	p.cached += int64(t.Bytes())
}

func (p *pool) close() {
	for k, l := range p.free {
		for _, t := range l {
			p.acct.free(p.cat, t)
		}
		delete(p.free, k)
	}
	p.cached = 0
}
