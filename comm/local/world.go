// Package local is the in-process backend of comm: N ranks as goroutines of
// one process, communicating through shared memory. It is deepgo's default
// on one machine and the engine of every multi-rank test.
//
// Algorithms are bandwidth-optimal for shared memory: after a rendezvous at
// which every rank posts its call and its tensors, ranks read each other's
// C-allocated buffers directly. An all-reduce has each rank reduce its 1/N
// slice of all N inputs with the C core's SIMD kernel (dg_reduce_into, in
// rank order, float32 accumulation) and then copy the other N-1 reduced
// slices; no rank makes a full copy of its input. Results are bit-for-bit
// deterministic: the same inputs give the same bits on every run, whatever
// the timing or thread count.
package local

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
)

// Options configure a World. The zero value is ready to use.
type Options struct {
	// Timeout is every operation's deadline (a context's earlier deadline
	// wins); 0 means comm.DefaultTimeout() (DEEPGO_TIMEOUT,
	// DEEPSPEED_TIMEOUT, else 10 minutes).
	Timeout time.Duration
	// Threads is the size of each rank's C thread pool; 0 means
	// max(1, GOMAXPROCS/n), so that N ranks together use the machine once.
	Threads int
	// Name is the world group's name in errors; "" means "world".
	Name string
}

// World is a set of N in-process ranks. Its methods are safe for
// concurrent use.
type World struct {
	n       int
	timeout time.Duration
	cpus    []*backend.CPU
	comms   []*rankComm

	aborted atomic.Pointer[failure]
	mu      sync.Mutex
	groups  []*group
	closed  bool
}

// NewWorld makes n ranks. Close it once every operation has returned.
func NewWorld(n int, opts Options) (*World, error) {
	if n < 1 {
		return nil, fmt.Errorf("local.NewWorld: n = %d: must be >= 1", n)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		d, err := comm.DefaultTimeout()
		if err != nil {
			return nil, fmt.Errorf("local.NewWorld: %w", err)
		}
		timeout = d
	}
	threads := opts.Threads
	if threads <= 0 {
		threads = max(1, runtime.GOMAXPROCS(0)/n)
	}
	name := opts.Name
	if name == "" {
		name = "world"
	}
	w := &World{n: n, timeout: timeout}
	for range n {
		cpu, err := backend.NewCPU(threads)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("local.NewWorld: %w", err)
		}
		w.cpus = append(w.cpus, cpu)
	}
	members := make([]int, n)
	for i := range members {
		members[i] = i
	}
	g := newGroup(w, name, members)
	for r := range n {
		w.comms = append(w.comms, newRankComm(g, r))
	}
	return w, nil
}

func (w *World) size() int { return w.n }

func (w *World) register(g *group) {
	w.mu.Lock()
	w.groups = append(w.groups, g)
	w.mu.Unlock()
}

// Size is the number of ranks.
func (w *World) Size() int { return w.n }

// Comm is rank r's handle on the world group.
func (w *World) Comm(r int) comm.Comm { return w.comms[r] }

// Comms returns every rank's handle, by rank.
func (w *World) Comms() []comm.Comm {
	out := make([]comm.Comm, w.n)
	for i, c := range w.comms {
		out[i] = c
	}
	return out
}

// Abort fails every pending and later operation of every rank, in the world
// and in every group split from it, with an error wrapping comm.ErrAborted
// and err. Only the first Abort counts.
func (w *World) Abort(err error) { w.abort(nil, err) }

func (w *World) abort(ranks []int, err error) {
	f := &failure{ranks: ranks, err: fmt.Errorf("%w: %w", comm.ErrAborted, err)}
	if !w.aborted.CompareAndSwap(nil, f) {
		return
	}
	w.mu.Lock()
	groups := append([]*group(nil), w.groups...)
	w.mu.Unlock()
	for _, g := range groups {
		g.breakWith(f)
	}
}

// Close releases the ranks' thread pools. No operation may be in flight.
func (w *World) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	for _, c := range w.cpus {
		c.Close()
	}
	return nil
}

// Run runs fn on n ranks of a new world, each in its own goroutine, like
// errgroup.WithContext: the first rank to fail (return an error or panic)
// cancels the context the others got and aborts the world, so their pending
// and later operations fail at once naming it. Run returns that first error
// (a panic becomes an error with the stack) once every rank has returned,
// then closes the world. The context fn gets says it runs in a Run of n
// ranks (RunSize).
func Run(ctx context.Context, n int, opts Options, fn func(ctx context.Context, c comm.Comm) error) error {
	w, err := NewWorld(n, opts)
	if err != nil {
		return err
	}
	defer w.Close()
	ctx = context.WithValue(ctx, runSizeKey{}, n)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	fail := func(r int, err error) {
		once.Do(func() { first = err })
		w.abort([]int{r}, err)
		cancel(err)
	}
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					fail(r, fmt.Errorf("rank %d panicked: %v\n%s", r, p, debug.Stack()))
				}
			}()
			if err := fn(ctx, w.comms[r]); err != nil {
				fail(r, fmt.Errorf("rank %d: %w", r, err))
			}
		}()
	}
	wg.Wait()
	return first
}

// runSizeKey keys the Run size in a rank's context.
type runSizeKey struct{}

// RunSize is the number of ranks of the Run whose fn received ctx (or a
// context derived from it), and 0 for a context from anywhere else.
// deepgo.Initialize reads it to refuse an engine built inside a Run of
// several ranks without the comm Run handed that rank, which would train
// each rank alone as a world of one.
func RunSize(ctx context.Context) int {
	n, _ := ctx.Value(runSizeKey{}).(int)
	return n
}
