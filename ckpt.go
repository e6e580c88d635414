package deepgo

// Activation checkpointing for any model (model.Checkpointed): the engine
// runs a checkpointed segment's forward in a scratch arena, keeps only the
// segment's input (the boundary activation) until backward, frees the rest
// at once, and recomputes the segment's forward just before its backward.
// How the boundaries are kept is the activation_checkpointing section's
// business (ckpt_store.go).

import (
	"context"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// span is a checkpointed segment as positions [lo, hi) in the micro-step's
// module sequence.
type span struct{ lo, hi int }

// ckptRun is the engine's checkpointing state; nil when the model declares
// no segments.
type ckptRun struct {
	cfg  config.ActivationCheckpointing
	be   backend.Backend
	tp   comm.Comm // partition_activations' group; nil keeps boundaries whole
	host bool      // cpu_checkpointing: boundaries in host memory

	// scratch[0] holds a segment's forward; backward alternates the two,
	// since segment s's input gradient (in scratch[s%2]) lives until the
	// module before it has run backward.
	scratch [2]tensor.Arena
	// edge holds a segment's output copied out of scratch when it is the
	// next segment's input but kept partitioned or on the host: whole on
	// the device only while the next segment runs forward (or restored
	// for its recompute).
	edge [2]tensor.Arena
	// pre holds host-kept inputs prefetched to the device in backward:
	// segment s's in pre[s%2], alive through its recompute and backward.
	pre   [2]tensor.Arena
	store // the kept boundaries

	spans []span
	first map[int]int // lo -> span index
	last  map[int]int // hi-1 -> span index
	kept  []kept      // per span: its input as kept for backward

	stats        CheckpointStats
	monRecompute time.Duration // stats.Recompute at the last monitor record
	peakSaved    int64         // the most boundary bytes a forward kept
}

// CheckpointStats is what activation checkpointing kept and cost on this
// rank (Engine.CheckpointStats).
type CheckpointStats struct {
	// Segments is the number of checkpointed segments in the last forward.
	Segments int `json:"segments"`
	// SavedBytes is the boundary activations kept from the last forward to
	// its backward on the device (the compute backend's memory), this
	// rank's partitions under partition_activations; SavedHostBytes those
	// kept in host memory (cpu_checkpointing). Boundaries the model owns
	// (kept by reference) count in neither.
	SavedBytes     int64 `json:"saved_bytes"`
	SavedHostBytes int64 `json:"saved_host_bytes"`
	// BufferBytes is contiguous_memory_optimization's one buffer.
	BufferBytes int64 `json:"buffer_bytes"`
	// ScratchPeak is the most any one segment's forward or recompute
	// held at once in the engine's scratch arenas.
	ScratchPeak int64 `json:"scratch_peak_bytes"`
	// Recompute is the cumulative time of the recomputed forwards.
	Recompute time.Duration `json:"recompute_ns"`
	// AsyncCopies counts, cumulatively, the boundary copies between device
	// and host memory (cpu_checkpointing) started without waiting: one
	// down per kept boundary in forward, one up per prefetch in backward.
	// CopiesInFlight is how many of them had not finished when the engine,
	// having issued the segment they overlap (the next segment's forward,
	// the current segment's recompute and backward), came to wait for
	// them. On the CPU backend both are 0.
	AsyncCopies    int64 `json:"async_copies"`
	CopiesInFlight int64 `json:"copies_in_flight"`
	// Profile is per segment (profile: true): forward and recompute time
	// and kept bytes of the last micro-step.
	Profile []SegmentProfile `json:"profile,omitempty"`
}

// SegmentProfile is one checkpointed segment's cost (profile: true).
type SegmentProfile struct {
	// First and Last name the segment's modules (model.Segment).
	First, Last string
	// Forward and Recompute are the segment's forward and recomputed
	// forward times in the last micro-step.
	Forward, Recompute time.Duration
	// SavedBytes is what the engine kept of the segment's input, on the
	// device or the host (0 when kept by reference).
	SavedBytes int64
}

// newCkpt sets checkpointing up when net declares segments.
func newCkpt(cfg *config.Config, net model.Model, be backend.Backend, tp comm.Comm) (*ckptRun, []string) {
	ac := cfg.ActivationCheckpointing
	cp, ok := net.(model.Checkpointed)
	var notes []string
	if ac != (config.ActivationCheckpointing{}) && (!ok || len(cp.CheckpointSegments()) == 0) {
		notes = append(notes, fmt.Sprintf("activation_checkpointing: the model (%T) declares no checkpoint segments (model.Checkpointed), so nothing is recomputed and the section has no effect", net))
	}
	if !ok {
		return nil, notes
	}
	c := &ckptRun{cfg: ac, be: be}
	if ac.CPUCheckpointing && !ac.PartitionActivations {
		notes = append(notes, "activation_checkpointing.cpu_checkpointing has no effect without partition_activations (as in DeepSpeed): boundaries stay on the device")
	}
	if ac.PartitionActivations && tp != nil && tp.Size() > 1 {
		c.tp = tp
	} else if ac.PartitionActivations {
		notes = append(notes, "activation_checkpointing.partition_activations: no tensor-parallel group (size 1): each rank keeps its boundaries whole")
	}
	if ac.CPUCheckpointing && ac.PartitionActivations {
		if be.Device().IsCPU() {
			notes = append(notes, "activation_checkpointing.cpu_checkpointing: the CPU backend's boundaries are in host memory already")
		} else {
			c.host = true
			c.hostSaved.SetAlloc(func(dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
				return backend.HostEmpty(be, dt, shape...)
			})
		}
	}
	if ac.SynchronizeCheckpointBoundary && be.Device().IsCPU() {
		notes = append(notes, "activation_checkpointing.synchronize_checkpoint_boundary: CPU kernels are synchronous, nothing to synchronise")
	}
	if !be.Device().IsCPU() {
		for i := range c.scratch {
			c.scratch[i].SetAlloc(be.Empty)
			c.edge[i].SetAlloc(be.Empty)
			c.pre[i].SetAlloc(be.Empty)
		}
		if !c.host {
			c.saved.SetAlloc(be.Empty)
		}
	}
	return c, notes
}

// plan maps the model's segments onto this forward's module sequence.
func (c *ckptRun) plan(net model.Model, mods []model.Module) error {
	segs := net.(model.Checkpointed).CheckpointSegments()
	pos := make(map[string]int, len(mods))
	for i, m := range mods {
		pos[m.Name()] = i
	}
	c.spans, c.kept = c.spans[:0], c.kept[:0]
	c.first, c.last = map[int]int{}, map[int]int{}
	limit := len(segs)
	if n := c.cfg.NumberCheckpoints; n != nil && *n < limit {
		limit = *n
	}
	prev := 0
	for i, s := range segs[:limit] {
		lo, ok1 := pos[s.First]
		hi, ok2 := pos[s.Last]
		switch {
		case !ok1 || !ok2:
			return fmt.Errorf("deepgo: checkpoint segment %d (%q to %q): a module it names is not in this forward's modules", i, s.First, s.Last)
		case hi < lo:
			return fmt.Errorf("deepgo: checkpoint segment %d (%q to %q): its last module runs before its first", i, s.First, s.Last)
		case lo < prev:
			return fmt.Errorf("deepgo: checkpoint segment %d (%q to %q) overlaps or precedes the segment before it", i, s.First, s.Last)
		}
		c.first[lo], c.last[hi] = len(c.spans), len(c.spans)
		c.spans = append(c.spans, span{lo, hi + 1})
		c.kept = append(c.kept, kept{})
		prev = hi + 1
	}
	c.stats.Segments = len(c.spans)
	c.stats.SavedBytes, c.stats.SavedHostBytes = 0, 0
	if c.cfg.Profile {
		c.stats.Profile = make([]SegmentProfile, len(c.spans))
		for i, s := range segs[:limit] {
			c.stats.Profile[i].First, c.stats.Profile[i].Last = s.First, s.Last
		}
	}
	return nil
}

// reset frees everything of the micro-step (its Backward is over, or a
// new Forward replaces one never followed by Backward).
func (c *ckptRun) reset() {
	c.drain()
	for i := range c.scratch {
		c.scratch[i].Reset()
		c.edge[i].Reset()
		c.pre[i].Reset()
	}
	c.store.reset()
	clear(c.kept)
}

// bytes is the checkpointing memory alive now: device and host.
func (c *ckptRun) bytes() (dev, host int64) {
	for i := range c.scratch {
		dev += c.scratch[i].Bytes() + c.edge[i].Bytes() + c.pre[i].Bytes()
	}
	d, h := c.store.bytes()
	return dev + d, host + h
}

func (c *ckptRun) sync(ctx context.Context) error {
	if !c.cfg.SynchronizeCheckpointBoundary || c.be.Device().IsCPU() {
		return nil
	}
	return c.be.Synchronize(ctx)
}

func (c *ckptRun) notePeak(a *tensor.Arena) {
	c.stats.ScratchPeak = max(c.stats.ScratchPeak, a.Bytes())
}

// forwardSegment runs span s's modules on in with their buffers in
// scratch, then carries the output out of it: into what span s+1 keeps
// when it starts right after, else into the micro-step arena.
func (e *Engine) forwardSegment(ctx, mctx context.Context, seq []int, s int, in model.Activation) (model.Activation, error) {
	c := e.ck
	sp := c.spans[s]
	if c.kept[s].data == nil && c.kept[s].ref == nil {
		c.kept[s] = kept{ref: in} // not the engine's: kept as it is
	}
	if err := c.sync(ctx); err != nil {
		return nil, err
	}
	t0 := time.Now()
	a := &c.scratch[0]
	a.Reset()
	a.Open()
	sctx := tensor.WithArena(mctx, a)
	act := in
	var err error
	for i := sp.lo; i < sp.hi; i++ {
		if act, err = e.forwardModule(ctx, sctx, seq[i], act); err != nil {
			return nil, err
		}
	}
	c.notePeak(a)
	out, err := e.carry(ctx, seq, s, act, a)
	a.Reset()
	// the input was only needed whole for this forward, and for its copy
	// to the host, which this forward overlapped
	if werr := c.settle(ctx, s); err == nil && werr != nil {
		err = fmt.Errorf("deepgo: copying a checkpoint boundary to host memory: %w", werr)
	}
	c.edge[s%2].Reset()
	if err == nil {
		err = c.sync(ctx)
	}
	if c.cfg.Profile {
		c.stats.Profile[s].Forward += time.Since(t0)
	}
	return out, err
}

// carry moves span s's output out of its scratch arena a, when a holds it.
func (e *Engine) carry(ctx context.Context, seq []int, s int, out model.Activation, a *tensor.Arena) (model.Activation, error) {
	c := e.ck
	sp := c.spans[s]
	last := e.mods[seq[sp.hi-1]].Name()
	t, ok := out.(*tensor.Tensor)
	if !ok {
		// its buffers are about to be freed, and the engine cannot see
		// inside it to copy them out
		return nil, fmt.Errorf("deepgo: checkpoint segment ending at module %q returns %T: not supported: a checkpointed segment's output must be a *tensor.Tensor", last, out)
	}
	if !a.Holds(t) {
		return out, nil // the model's own memory
	}
	if !t.Contiguous() {
		return nil, fmt.Errorf("deepgo: checkpoint segment ending at module %q returns a non-contiguous tensor %v: not supported", last, t.Shape())
	}
	next, chained := c.first[sp.hi]
	if !chained {
		// a plain module or the loss follows: it needs the output whole
		// until backward
		dst, err := e.arena.Empty(t.DType(), t.Shape()...)
		if err == nil {
			err = e.be.Copy(dst, t)
		}
		return dst, err
	}
	k, whole, err := c.keep(ctx, next, t)
	if err != nil {
		return nil, err
	}
	c.kept[next] = k
	if c.cfg.Profile {
		c.stats.Profile[next].SavedBytes = k.bytes()
	}
	return whole, nil
}

// backwardSegment restores span s's input, recomputes its forward (ZeRO
// stage 3 gathering each module again) and runs its modules' backward.
func (e *Engine) backwardSegment(ctx, mctx context.Context, seq []int, s int, g model.Activation) (model.Activation, error) {
	c := e.ck
	sp := c.spans[s]
	a := &c.scratch[s%2]
	a.Reset()
	a.Open()
	if err := c.sync(ctx); err != nil {
		return nil, err
	}
	t0 := time.Now()
	in, err := c.restore(ctx, s, a)
	if err != nil {
		return nil, err
	}
	// the segment before comes back from the host while this one runs
	if err := c.prefetch(s - 1); err != nil {
		return nil, err
	}
	sctx := tensor.WithArena(mctx, a)
	act := in
	for i := sp.lo; i < sp.hi; i++ {
		m := seq[i]
		if err := e.z.PreForward(ctx, m); err != nil {
			return nil, err
		}
		e.bind(m)
		out, err := e.mods[m].Forward(sctx, act)
		if err != nil {
			return nil, fmt.Errorf("deepgo: recomputing the forward of module %q: %w", e.mods[m].Name(), err)
		}
		act = out
		if err := e.z.PostForward(ctx, m); err != nil {
			return nil, err
		}
		e.bind(m)
	}
	if err := e.timerSync(ctx, nil); err != nil {
		return nil, err
	}
	d := time.Since(t0)
	c.stats.Recompute += d
	e.timers.Backward += d
	if c.cfg.Profile {
		c.stats.Profile[s].Recompute += d
	}
	if err := c.sync(ctx); err != nil {
		return nil, err
	}
	for i := sp.hi - 1; i >= sp.lo; i-- {
		if g, err = e.backwardModule(ctx, sctx, seq[i], g); err != nil {
			return nil, err
		}
	}
	c.notePeak(a)
	return g, nil
}

// CheckpointStats reports activation checkpointing on this rank: the
// zero value when the model declares no segments.
func (e *Engine) CheckpointStats() CheckpointStats {
	if e.ck == nil {
		return CheckpointStats{}
	}
	s := e.ck.stats
	s.BufferBytes = e.ck.store.bufferBytes()
	s.Profile = append([]SegmentProfile(nil), s.Profile...)
	return s
}

// startsAt reports the span starting at position i (nil-safe).
func (c *ckptRun) startsAt(i int) (int, bool) {
	if c == nil {
		return 0, false
	}
	s, ok := c.first[i]
	return s, ok
}

// endsAt reports the span ending at position i (nil-safe).
func (c *ckptRun) endsAt(i int) (int, bool) {
	if c == nil {
		return 0, false
	}
	s, ok := c.last[i]
	return s, ok
}

// endForward takes the kept bytes of the forward just run (nil-safe).
func (c *ckptRun) endForward() {
	if c == nil {
		return
	}
	c.stats.SavedBytes, c.stats.SavedHostBytes = 0, 0
	for _, k := range c.kept {
		if k.host {
			c.stats.SavedHostBytes += k.bytes()
		} else {
			c.stats.SavedBytes += k.bytes()
		}
	}
	c.peakSaved = max(c.peakSaved, c.stats.SavedBytes+c.stats.SavedHostBytes)
}

// ActivationBytes bounds the activation memory the engine held for the
// modules at once so far: the micro-step arena's peak, plus, with
// activation checkpointing, the most boundary bytes a forward kept and the
// scratch peak of a segment. Memory a model keeps itself (nn.GPT's
// ActivationStats) is not included.
func (e *Engine) ActivationBytes() int64 {
	n := e.arena.Peak()
	if e.ck != nil {
		n += e.ck.peakSaved + e.ck.stats.ScratchPeak
	}
	return n
}
