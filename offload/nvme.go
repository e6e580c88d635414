package offload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/deepgo-ml/deepgo/aio"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/tensor"
)

// NVMeOptions configure an NVMeStore.
type NVMeOptions struct {
	// Path is offload_optimizer.nvme_path; the store works in a folder of
	// its own under it, one per rank.
	Path string
	// Rank names the folder.
	Rank int
	// Plan is buffer_count, pipeline_read and pipeline_write.
	Plan PlanOptions
	// AIO configures the I/O engine (the aio section).
	AIO aio.Options
}

// NVMeOptionsFromConfig reads offload_optimizer and aio for rank.
func NVMeOptionsFromConfig(c *config.Config, rank int) (NVMeOptions, error) {
	oo := c.ZeroOptimization.OffloadOptimizer
	if oo == nil || oo.Device != "nvme" || oo.NvmePath == nil || *oo.NvmePath == "" {
		return NVMeOptions{}, errors.New(`offload: zero_optimization.offload_optimizer: want device "nvme" with an nvme_path`)
	}
	return NVMeOptions{Path: *oo.NvmePath, Rank: rank, AIO: aio.FromConfig(c.AIO),
		Plan: PlanOptions{Buffers: oo.BufferCount, PipelineRead: oo.PipelineRead, PipelineWrite: oo.PipelineWrite}}, nil
}

// SwapDir is the folder of rank's swap files under path.
func SwapDir(path string, rank int) string {
	return filepath.Join(path, fmt.Sprintf("deepgo-optimizer-swap-rank%d", rank))
}

// NVMeStore is an optim.StateStore that keeps every sub-group's state in
// a file and only Buffers sub-groups' state in host memory. Sub-groups
// step in the order they first stepped in; the first step learns that
// order and runs each read and write to the end, later steps follow a Plan.
// An Acquire out of that order (loading a checkpoint) waits for all I/O in
// flight and runs unplanned. One sub-group is held at a time.
type NVMeStore struct {
	eng  *aio.Engine
	dir  string
	lock *swapLock // dir, for this run
	popt PlanOptions

	mu       sync.Mutex
	groups   map[string]*swapGroup
	order    []*swapGroup
	bufs     []*aio.Buffer
	bufBytes int
	plan     *Plan
	cursor   int // index of the held (or next) group of the plan; -1 outside a planned step
	held     *swapGroup
	planned  bool // the held group follows the plan
	reads    map[int]*aio.Request
	writes   map[int]*aio.Request
	lookup   *aio.Buffer
	peak     int64         // high-water mark of the buffers' bytes
	waited   time.Duration // blocked on swap I/O (IOStats)
	wbuf     map[int]int   // the buffer each write in s.writes is from
	carry    *carried      // I/O carried past the last step's end (carry.go)
	// prefetched: s.reads (once carry is joined) holds the next planned
	// step's first reads
	prefetched bool
}

// swapGroup is one sub-group's file and state layout: names × params
// float32 tensors back to back.
type swapGroup struct {
	name    string
	idx     int
	names   []string
	shapes  [][]int
	numel   int // per name
	file    *aio.File
	written bool
}

func (g *swapGroup) bytes() int { return len(g.names) * g.numel * 4 }

// present checks that the swap file still has its name: an open file
// outlives it, so a swap file removed under the run would read back what
// was written until the next start, and then be gone.
func (g *swapGroup) present() error {
	if _, err := os.Stat(g.file.Path()); err != nil {
		return fmt.Errorf("offload: sub-group %q: swap file removed while training: %w", g.name, err)
	}
	return nil
}

// NewNVMeStore opens the engine and an empty swap folder; a folder a crashed
// run left behind is removed first.
func NewNVMeStore(o NVMeOptions) (*NVMeStore, error) {
	if _, err := NewPlan(0, o.Plan); err != nil {
		return nil, err
	}
	if o.Path == "" {
		return nil, errors.New("offload: nvme_path is empty")
	}
	dir := SwapDir(o.Path, o.Rank)
	lock, err := lockSwapDir("nvme_path", o.Path, dir)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, errors.Join(fmt.Errorf("offload: removing the swap folder of an earlier run: %w", err), lock.release())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errors.Join(fmt.Errorf("offload: nvme_path %q: %w", o.Path, err), lock.release())
	}
	eng, err := aio.Open(o.AIO)
	if err != nil {
		os.RemoveAll(dir)
		return nil, errors.Join(err, lock.release())
	}
	return &NVMeStore{eng: eng, dir: dir, lock: lock, popt: o.Plan, groups: map[string]*swapGroup{}, cursor: -1,
		reads: map[int]*aio.Request{}, writes: map[int]*aio.Request{}, wbuf: map[int]int{}}, nil
}

// Dir is the store's swap folder.
func (s *NVMeStore) Dir() string { return s.dir }

// Engine is the store's I/O engine (its Stats count the swap I/O).
func (s *NVMeStore) Engine() *aio.Engine { return s.eng }

func (s *NVMeStore) group(name string, names []string, params []*tensor.Tensor) (*swapGroup, error) {
	g := s.groups[name]
	if g == nil {
		g = &swapGroup{name: name, idx: -1, names: slices.Clone(names)}
		for _, p := range params {
			g.shapes = append(g.shapes, p.Shape())
			g.numel += p.Numel()
		}
		f, err := s.eng.OpenFile(filepath.Join(s.dir, fmt.Sprintf("group%d.swp", len(s.groups))), os.O_RDWR|os.O_CREATE|os.O_TRUNC)
		if err != nil {
			return nil, err
		}
		g.file = f
		s.groups[name] = g
		return g, nil
	}
	if !slices.Equal(g.names, names) {
		return nil, fmt.Errorf("state of group %q is %v, now asked for %v", name, g.names, names)
	}
	if len(g.shapes) != len(params) {
		return nil, fmt.Errorf("state of group %q has %d tensors, the group now has %d params", name, len(g.shapes), len(params))
	}
	for i, p := range params {
		if !slices.Equal(g.shapes[i], p.Shape()) {
			return nil, fmt.Errorf("state[%d] of group %q has shape %v, params[%d] has %v", i, name, g.shapes[i], i, p.Shape())
		}
	}
	return g, nil
}

// Acquire implements optim.StateStore: the group's state, read from its
// file (zero before its first Release), in a swap buffer until Release.
func (s *NVMeStore) Acquire(group string, names []string, params []*tensor.Tensor) (map[string][]*tensor.Tensor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		return nil, fmt.Errorf("offload: Acquire(%q) while %q is held: one sub-group at a time", group, s.held.name)
	}
	g, err := s.group(group, names, params)
	if err != nil {
		return nil, fmt.Errorf("offload: %w", err)
	}
	if g.bytes() > s.bufBytes {
		if err := s.grow(g.bytes()); err != nil {
			return nil, err
		}
	}
	if g.idx < 0 {
		g.idx = len(s.order)
		s.order = append(s.order, g)
		s.plan = nil
	}
	if g.idx == 0 && s.plan == nil {
		if s.plan, err = NewPlan(len(s.order), s.popt); err != nil {
			return nil, err
		}
	}
	if g.idx == 0 && s.cursor != 0 {
		// a new step: the last one's carried I/O joins the plan; one that
		// ended part way left I/O to finish first
		if s.prefetched {
			s.prefetched = false
			if err := s.join(); err != nil {
				return nil, s.abort(err)
			}
		} else if err := s.drain(); err != nil {
			return nil, err
		}
		s.cursor = 0
	}
	buf := 0
	s.planned = s.plan != nil && s.cursor == g.idx && g.idx < len(s.plan.Before)
	if s.planned {
		if err := s.run(s.plan.Before[g.idx]); err != nil {
			return nil, s.abort(err)
		}
		buf = s.plan.BufferOf[g.idx]
	} else {
		if err := s.drain(); err != nil {
			return nil, err
		}
		s.cursor = -1
		if err := s.run([]Action{{IssueRead, g.idx, 0}, {WaitRead, g.idx, 0}}); err != nil {
			return nil, err
		}
	}
	b, err := s.buffer(buf)
	if err != nil {
		return nil, err
	}
	st, err := views(g, b)
	if err != nil {
		return nil, err
	}
	s.held = g
	return st, nil
}

// Release implements optim.StateStore: the group's state goes back to its
// file, waited for now or later as the plan says (always by the end of the
// step's last group).
func (s *NVMeStore) Release(group string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.held
	if g == nil || g.name != group {
		return fmt.Errorf("offload: Release(%q): not the held group", group)
	}
	s.held = nil
	if !s.planned {
		return s.run([]Action{{IssueWrite, g.idx, 0}, {WaitWrite, g.idx, 0}})
	}
	run := s.run
	if g.idx == len(s.plan.After)-1 {
		run = s.endStep
	}
	if err := run(s.plan.After[g.idx]); err != nil {
		return s.abort(err)
	}
	s.cursor++
	if s.cursor == len(s.plan.Before) {
		s.cursor = -1
	}
	return nil
}

// run carries out actions. A group never written reads as zeros.
func (s *NVMeStore) run(actions []Action) error {
	for _, a := range actions {
		g := s.order[a.Group]
		buf, err := s.buffer(a.Buffer)
		if err != nil {
			return err
		}
		switch a.Kind {
		case IssueRead:
			if s.reads[a.Group] != nil {
				continue // prefetched behind the last step's end
			}
			if err := s.waitCarried(a.Group, a.Buffer); err != nil {
				return err
			}
			if !g.written {
				clear(buf.Bytes()[:g.bytes()])
				continue
			}
			if err := g.present(); err != nil {
				return err
			}
			s.reads[a.Group], err = g.file.ReadAt(buf, g.bytes(), 0)
		case WaitRead:
			err = s.wait(s.reads, a.Group)
		case IssueWrite:
			s.writes[a.Group], err = g.file.WriteAt(buf, g.bytes(), 0)
			s.wbuf[a.Group] = a.Buffer
			g.written = true
		case WaitWrite:
			err = s.wait(s.writes, a.Group)
		}
		if err != nil {
			return fmt.Errorf("offload: sub-group %q: %w", g.name, err)
		}
	}
	return nil
}

func (s *NVMeStore) wait(m map[int]*aio.Request, group int) error {
	r := m[group]
	if r == nil {
		return nil
	}
	delete(m, group)
	t0 := time.Now()
	err := r.Wait(context.Background())
	s.waited += time.Since(t0)
	return err
}

// drain waits for every read and write in flight; prefetched state is
// dropped (its file still holds it).
func (s *NVMeStore) drain() error {
	errs := []error{s.join()}
	s.prefetched = false
	for _, m := range []map[int]*aio.Request{s.reads, s.writes} {
		for g := range m {
			if err := s.wait(m, g); err != nil {
				errs = append(errs, fmt.Errorf("offload: sub-group %q: %w", s.order[g].name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// abort ends a planned step that failed: nothing may stay in flight.
func (s *NVMeStore) abort(err error) error {
	s.cursor = -1
	return errors.Join(err, s.drain())
}

// grow replaces the swap buffers by ones of at least n bytes; nothing is in
// flight outside a planned step, and a planned step's groups all fit. The
// buffers are allocated at first use (buffer), so that a run with fewer
// sub-groups than buffer_count (sub_group_size's default of 1e9 makes one
// per rank for most models) holds only the buffers its plan uses.
func (s *NVMeStore) grow(n int) error {
	if err := s.drain(); err != nil {
		return err
	}
	s.cursor = -1
	for _, b := range s.bufs {
		if b != nil {
			if err := b.Free(); err != nil {
				return err
			}
		}
	}
	s.bufs = make([]*aio.Buffer, s.popt.Buffers)
	s.bufBytes = n
	return nil
}

// buffer is swap buffer i, allocated on first use.
func (s *NVMeStore) buffer(i int) (*aio.Buffer, error) {
	if s.bufs[i] == nil {
		b, err := s.eng.NewBuffer(s.bufBytes)
		if err != nil {
			return nil, fmt.Errorf("offload: swap buffer of %d bytes: %w", s.bufBytes, err)
		}
		s.bufs[i] = b
		s.notePeak()
	}
	return s.bufs[i], nil
}

// resident is the host memory the buffers take now.
func (s *NVMeStore) resident() int64 {
	var n int64
	for _, b := range append(s.bufs, s.lookup) {
		if b != nil {
			n += int64(b.Cap())
		}
	}
	return n
}

func (s *NVMeStore) notePeak() { s.peak = max(s.peak, s.resident()) }

// SwapUsage reports the host memory the store's buffers take now
// (buffer_count swap buffers of the largest sub-group's state, and the one
// Lookup reads into), its high-water mark, and the state bytes held in
// swap files: what NVMe offload moves out of memory.
func (s *NVMeStore) SwapUsage() (resident, peak, disk int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.order {
		if g.written {
			disk += int64(g.bytes())
		}
	}
	return s.resident(), s.peak, disk
}

// views lays g's state out in buf: name after name, param after param.
func views(g *swapGroup, buf *aio.Buffer) (map[string][]*tensor.Tensor, error) {
	st := tensor.WrapStorage(buf.Ptr(), buf.Cap(), tensor.CPU, nil)
	out := make(map[string][]*tensor.Tensor, len(g.names))
	off := 0
	for _, name := range g.names {
		ts := make([]*tensor.Tensor, len(g.shapes))
		for i, shape := range g.shapes {
			t, err := tensor.FromStorage(st, tensor.Float32, off, shape...)
			if err != nil {
				return nil, fmt.Errorf("offload: view of %s[%d] of %q: %w", name, i, g.name, err)
			}
			ts[i] = t
			off += t.Numel()
		}
		out[name] = ts
	}
	return out, nil
}

// Lookup implements optim.StateStore: ReadState without its error (nil
// for a group never stepped and for one whose file cannot be read; callers
// that must tell the two apart use ReadState).
func (s *NVMeStore) Lookup(group string) map[string][]*tensor.Tensor {
	st, _ := s.ReadState(group)
	return st
}

// ReadState is the held group's state, or the group's file read into a
// buffer of the store's (valid until the next ReadState, Lookup, Acquire
// or Close); nil and no error for a group never stepped. An I/O error, a
// removed swap file among them, is returned naming the file.
func (s *NVMeStore) ReadState(group string) (map[string][]*tensor.Tensor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[group]
	if g == nil || !g.written && s.held != g {
		return nil, nil
	}
	if s.held == g {
		buf := 0
		if s.planned {
			buf = s.plan.BufferOf[g.idx]
		}
		b, err := s.buffer(buf)
		if err != nil {
			return nil, err
		}
		return views(g, b)
	}
	if s.held == nil {
		if err := s.drain(); err != nil {
			return nil, err
		}
	}
	if err := s.wait(s.writes, g.idx); err != nil {
		return nil, fmt.Errorf("offload: sub-group %q: %w", g.name, err)
	}
	if s.lookup == nil || s.lookup.Cap() < g.bytes() {
		if s.lookup != nil {
			_ = s.lookup.Free()
		}
		b, err := s.eng.NewBuffer(g.bytes())
		if err != nil {
			return nil, fmt.Errorf("offload: sub-group %q: %w", g.name, err)
		}
		s.lookup = b
		s.notePeak()
	}
	if err := g.present(); err != nil {
		return nil, err
	}
	r, err := g.file.ReadAt(s.lookup, g.bytes(), 0)
	if err == nil {
		err = r.Wait(context.Background())
	}
	if err != nil {
		return nil, fmt.Errorf("offload: sub-group %q: %w", g.name, err)
	}
	return views(g, s.lookup)
}

// Close implements optim.StateStore: waits for I/O in flight, frees the
// buffers, stops the engine and removes the swap folder.
func (s *NVMeStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := []error{s.drain()}
	for _, b := range append(s.bufs, s.lookup) {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	s.bufs, s.lookup = nil, nil
	errs = append(errs, s.eng.Close(), os.RemoveAll(s.dir), s.lock.release())
	s.groups, s.order, s.plan, s.held = map[string]*swapGroup{}, nil, nil, nil
	return errors.Join(errs...)
}
