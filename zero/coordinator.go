package zero

import "slices"

// CoordinatorConfig holds the stage-3 knobs of zero_optimization, in
// elements.
type CoordinatorConfig struct {
	// PrefetchBucketSize is stage3_prefetch_bucket_size: how many elements
	// may be gathered ahead of use (0 disables prefetch).
	PrefetchBucketSize int64
	// MaxLiveParameters is stage3_max_live_parameters: prefetch never takes
	// the gathered, non-persistent elements past this. The module about to
	// run is always gathered, even beyond it.
	MaxLiveParameters int64
	// MaxReuseDistance is stage3_max_reuse_distance: after a module runs,
	// its parameters stay gathered if the trace uses them again before this
	// many other elements are fetched.
	MaxReuseDistance int64
}

// TraceMode is the state of the stage-3 trace, as in DeepSpeed's
// PartitionedParameterCoordinator.
type TraceMode int

// Trace modes.
const (
	// TraceRecord: the module order of this micro-step is being recorded;
	// no prefetch, every module released right after use.
	TraceRecord TraceMode = iota
	// TraceComplete: the recorded order drives prefetch and release.
	TraceComplete
)

// Actions is what the executor must do at one hook of the Coordinator.
type Actions struct {
	// Gather lists modules whose parameters must be all-gathered now (the
	// current one first when it was not available, then prefetches).
	Gather []int
	// Release lists modules whose gathered parameters can be freed.
	Release []int
}

// CoordinatorStats are the observable counters of the Coordinator.
type CoordinatorStats struct {
	Gathers           int   // all-gathers started, prefetches included
	Prefetches        int   // of which started ahead of use
	Releases          int   // gathered buffers released
	ReuseHolds        int   // releases skipped by stage3_max_reuse_distance
	Invalidations     int   // trace invalidated because the order changed
	LiveNumel         int64 // non-persistent elements gathered now
	PeakLiveNumel     int64 // the largest LiveNumel seen
	PersistentNumel   int64 // elements kept gathered for good
	PersistentModules int   // modules kept gathered for good
	// SecondaryGathers counts the Gathers served by the hpZ group from
	// secondary partitions, SecondaryNumel the secondary elements this
	// rank holds (zero_hpz_partition_size > 1; the Optimizer fills both).
	SecondaryGathers int
	SecondaryNumel   int64
}

// Coordinator is stage 3's fetch plan as a pure state machine: the executor
// calls ResetStep before each forward, Fetch before a module runs (forward
// or backward), Release after, and performs the returned Actions. It
// records the module order of the first micro-step (TraceRecord), then uses
// it to prefetch ahead (TraceComplete); an order that diverges from the
// trace invalidates it and recording starts again at the next ResetStep.
type Coordinator struct {
	cfg        CoordinatorConfig
	numel      []int64
	persistent []bool
	mode       TraceMode
	trace      []int
	rec        []int
	pos        int
	avail      []bool
	stats      CoordinatorStats
	eval       *traceState // the trace as an evaluation found it (BeginEval), nil outside one
}

// traceState is the Coordinator's trace bookkeeping, kept aside during an
// evaluation.
type traceState struct {
	mode       TraceMode
	trace, rec []int
	pos        int
}

// NewCoordinator plans for modules of numel[m] elements; persistent[m]
// modules are gathered once and never released.
func NewCoordinator(cfg CoordinatorConfig, numel []int64, persistent []bool) *Coordinator {
	c := &Coordinator{cfg: cfg, numel: numel, persistent: persistent, avail: make([]bool, len(numel))}
	for m, p := range persistent {
		if p {
			c.stats.PersistentNumel += numel[m]
			c.stats.PersistentModules++
		}
	}
	return c
}

// Mode is the trace state.
func (c *Coordinator) Mode() TraceMode { return c.mode }

// Trace is the recorded module order (nil while recording the first one).
func (c *Coordinator) Trace() []int { return append([]int(nil), c.trace...) }

// Stats returns the counters.
func (c *Coordinator) Stats() CoordinatorStats { return c.stats }

// Available reports whether module m is gathered or being gathered.
func (c *Coordinator) Available(m int) bool { return c.persistent[m] || c.avail[m] }

// ResetStep starts a micro-step: a finished recording becomes the trace.
// During an evaluation it only rewinds to the trace's start.
func (c *Coordinator) ResetStep() {
	if c.eval == nil && c.mode == TraceRecord && len(c.rec) > 0 {
		c.trace, c.rec, c.mode = c.rec, nil, TraceComplete
	}
	c.pos = 0
}

func (c *Coordinator) gather(a *Actions, m int) {
	c.avail[m] = true
	c.stats.LiveNumel += c.numel[m]
	c.stats.PeakLiveNumel = max(c.stats.PeakLiveNumel, c.stats.LiveNumel)
	c.stats.Gathers++
	a.Gather = append(a.Gather, m)
}

// Fetch is called before module m runs.
func (c *Coordinator) Fetch(m int) Actions {
	var a Actions
	if c.mode == TraceComplete && (c.pos >= len(c.trace) || c.trace[c.pos] != m) {
		c.mode, c.trace, c.rec = TraceRecord, nil, nil
		if c.eval == nil {
			c.stats.Invalidations++
		}
	}
	if c.mode == TraceRecord && c.eval == nil {
		c.rec = append(c.rec, m)
	}
	if !c.Available(m) {
		c.gather(&a, m)
	}
	c.pos++
	if c.mode != TraceComplete || c.cfg.PrefetchBucketSize <= 0 {
		return a
	}
	budget := min(c.cfg.PrefetchBucketSize, c.cfg.MaxLiveParameters-c.stats.LiveNumel)
	for j := c.pos; j < len(c.trace) && budget > 0; j++ {
		n := c.trace[j]
		if c.Available(n) {
			continue
		}
		if c.numel[n] > budget {
			break
		}
		budget -= c.numel[n]
		c.gather(&a, n)
		c.stats.Prefetches++
	}
	return a
}

// Release is called after module m ran.
func (c *Coordinator) Release(m int) Actions {
	var a Actions
	if c.persistent[m] || !c.avail[m] {
		return a
	}
	if c.mode == TraceComplete {
		var dist int64
		for j := c.pos; j < len(c.trace) && dist <= c.cfg.MaxReuseDistance; j++ {
			if c.trace[j] == m {
				c.stats.ReuseHolds++
				return a
			}
			dist += c.numel[c.trace[j]]
		}
	}
	c.release(&a, m)
	return a
}

func (c *Coordinator) release(a *Actions, m int) {
	c.avail[m] = false
	c.stats.LiveNumel -= c.numel[m]
	c.stats.Releases++
	a.Release = append(a.Release, m)
}

// BeginEval starts an evaluation: forward passes no backward follows. They
// prefetch along a complete trace while they follow it (a forward is the
// trace's first half), and otherwise, or once they leave it, gather each
// module as it runs and release it after, as while recording; they
// neither record nor invalidate the trace. EndEval puts the trace back as
// BeginEval found it.
func (c *Coordinator) BeginEval() {
	if c.eval != nil {
		return
	}
	c.eval = &traceState{mode: c.mode, trace: c.trace, rec: c.rec, pos: c.pos}
	if c.mode == TraceRecord {
		c.trace = nil
	}
	c.pos = 0
}

// EndEval ends an evaluation: it releases every non-persistent module
// gathered now (those the evaluation gathered or held, and any held from
// before it, which the next forward gathers again) and restores the trace
// as BeginEval found it.
func (c *Coordinator) EndEval() Actions {
	if c.eval == nil {
		return Actions{}
	}
	a := c.ReleaseAll()
	s := c.eval
	c.mode, c.trace, c.rec, c.pos, c.eval = s.mode, s.trace, s.rec, s.pos, nil
	return a
}

// ReleaseAll releases every non-persistent gathered module (at the
// optimizer step, when gathered copies become stale).
func (c *Coordinator) ReleaseAll() Actions {
	var a Actions
	for m, ok := range c.avail {
		if ok {
			c.release(&a, m)
		}
	}
	return a
}

// Upcoming lists up to k modules of the trace after the current position
// that are not gathered nor being gathered, in trace order (none while
// recording): the ones whose partitions a parameter store reads ahead.
func (c *Coordinator) Upcoming(k int) []int {
	if c.mode != TraceComplete {
		return nil
	}
	var out []int
	for j := c.pos; j < len(c.trace) && len(out) < k; j++ {
		if n := c.trace[j]; !c.Available(n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
