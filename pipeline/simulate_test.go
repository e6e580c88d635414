package pipeline

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The simulator runs every stage's schedule in lockstep the way an engine
// with blocking point-to-point transfers would, and checks the data flow:
// each Send meets the matching Recv of the same micro-batch on the
// neighbour in the same step, in an order that cannot deadlock; no buffer
// is overwritten while it holds a live micro-batch; each micro-batch is
// loaded, forwarded (and, when training, backwarded) exactly once per
// stage, in dependency order; and the optimizer tail closes the batch.
//
// It also runs interleaved schedules, where each stage holds several model
// chunks: chunk c of stage s is virtual stage c*stages+s, activations flow
// (s, c) -> (s+1, c) and, around the ring, (stages-1, c) -> (0, c+1), and
// gradients flow back the same way. Everything above is then checked per
// (micro-batch, chunk); loads belong to virtual stage 0 and to the last
// virtual stage. With one stage the ring closes on itself: a Send must be
// immediately followed by its own Recv.

// slot is what one pipeline buffer of one stage holds.
type slot struct {
	mb, chunk              int // mb is -1 when free
	input, output, outGrad bool
	backwarded             bool
}

type stageSim struct {
	id, stages, microBatches int
	virtual                  int // model chunks per stage
	training                 bool
	bufs                     []slot
	live, peak               int // buffers in use, now and at most
	// loaded, forwarded and backwarded count per chunk*microBatches+mb.
	loaded, forwarded []int
	backwarded        []int
	tail              []Op
}

func newStageSim(id, stages, microBatches, virtual, nbuf int, training bool) *stageSim {
	n := microBatches * virtual
	s := &stageSim{id: id, stages: stages, microBatches: microBatches, virtual: virtual, training: training,
		bufs:   make([]slot, nbuf),
		loaded: make([]int, n), forwarded: make([]int, n), backwarded: make([]int, n)}
	for i := range s.bufs {
		s.bufs[i].mb = -1
	}
	return s
}

// first and last report whether chunk c of this stage is the first or the
// last virtual stage.
func (s *stageSim) first(c int) bool { return s.id == 0 && c == 0 }
func (s *stageSim) last(c int) bool  { return s.id == s.stages-1 && c == s.virtual-1 }

// free empties buffer b.
func (s *stageSim) free(b *slot) {
	*b = slot{mb: -1}
	s.live--
}

// claim makes buffer b hold micro-batch mb, failing if it holds another
// live one.
func (s *stageSim) claim(in Instruction) (*slot, error) {
	if in.BufferID < 0 || in.BufferID >= len(s.bufs) {
		return nil, fmt.Errorf("buffer %d outside [0, %d)", in.BufferID, len(s.bufs))
	}
	b := &s.bufs[in.BufferID]
	if b.mb != -1 && (b.mb != in.MicroBatch || b.chunk != in.Chunk) {
		return nil, fmt.Errorf("buffer %d still holds live micro-batch %d (chunk %d)", in.BufferID, b.mb, b.chunk)
	}
	if b.mb == -1 {
		*b = slot{mb: in.MicroBatch, chunk: in.Chunk}
		s.live++
		s.peak = max(s.peak, s.live)
	}
	return b, nil
}

// holding returns buffer b if it holds micro-batch mb.
func (s *stageSim) holding(in Instruction) (*slot, error) {
	if in.BufferID < 0 || in.BufferID >= len(s.bufs) {
		return nil, fmt.Errorf("buffer %d outside [0, %d)", in.BufferID, len(s.bufs))
	}
	b := &s.bufs[in.BufferID]
	if b.mb != in.MicroBatch || b.chunk != in.Chunk {
		return nil, fmt.Errorf("buffer %d holds micro-batch %d chunk %d, not %d chunk %d", in.BufferID, b.mb, b.chunk, in.MicroBatch, in.Chunk)
	}
	return b, nil
}

// exec applies one instruction (transfers as already paired).
func (s *stageSim) exec(in Instruction) error {
	if in.Op.HasBuffer() && (in.MicroBatch < 0 || in.MicroBatch >= s.microBatches) {
		return fmt.Errorf("micro-batch %d outside [0, %d)", in.MicroBatch, s.microBatches)
	}
	if in.Op.HasBuffer() && (in.Chunk < 0 || in.Chunk >= s.virtual) {
		return fmt.Errorf("chunk %d outside [0, %d)", in.Chunk, s.virtual)
	}
	if !in.Op.HasBuffer() && in.Chunk != 0 {
		return fmt.Errorf("chunk %d on an op without a buffer", in.Chunk)
	}
	if len(s.tail) > 0 && in.Op.HasBuffer() {
		return fmt.Errorf("after %v", s.tail)
	}
	c := in.Chunk
	key := c*s.microBatches + in.MicroBatch
	switch in.Op {
	case LoadMicroBatch:
		if !s.first(c) && !s.last(c) {
			return fmt.Errorf("load on a middle stage")
		}
		if _, err := s.claim(in); err != nil {
			return err
		}
		s.loaded[key]++
	case RecvActivation:
		b, err := s.claim(in)
		if err != nil {
			return err
		}
		b.input = true
	case ForwardPass:
		b, err := s.holding(in)
		if err != nil {
			return err
		}
		if s.first(c) && s.loaded[key] == 0 || !s.first(c) && !b.input {
			return fmt.Errorf("forward before its input arrived")
		}
		if s.last(c) && s.loaded[key] == 0 {
			return fmt.Errorf("forward on the last stage before its labels were loaded")
		}
		if s.forwarded[key]++; s.forwarded[key] > 1 {
			return fmt.Errorf("micro-batch forwarded twice")
		}
		b.output = true
		if !s.training && s.last(c) {
			s.free(b)
		}
	case SendActivation:
		b, err := s.holding(in)
		if err != nil {
			return err
		}
		if !b.output {
			return fmt.Errorf("send before forward")
		}
		if !s.training {
			s.free(b)
		}
	case RecvGrad:
		b, err := s.holding(in)
		if err != nil {
			return err
		}
		if !b.output {
			return fmt.Errorf("gradient received before forward")
		}
		b.outGrad = true
	case BackwardPass:
		b, err := s.holding(in)
		if err != nil {
			return err
		}
		if !b.output || !s.last(c) && !b.outGrad {
			return fmt.Errorf("backward before forward or before its output gradient arrived")
		}
		if s.backwarded[key]++; s.backwarded[key] > 1 {
			return fmt.Errorf("micro-batch backwarded twice")
		}
		b.backwarded = true
		if s.first(c) { // no input gradient to send: the buffer is free
			s.free(b)
		}
	case SendGrad:
		b, err := s.holding(in)
		if err != nil {
			return err
		}
		if !b.backwarded {
			return fmt.Errorf("input gradient sent before backward")
		}
		s.free(b)
	case ReduceTiedGrads, ReduceGrads, OptimizerStep:
		if !s.training {
			return fmt.Errorf("optimizer op in an inference schedule")
		}
		for k, n := range s.backwarded {
			if n != 1 {
				return fmt.Errorf("micro-batch %d (chunk %d) backwarded %d times before the optimizer tail", k%s.microBatches, k/s.microBatches, n)
			}
		}
		want := []Op{ReduceTiedGrads, ReduceGrads, OptimizerStep}[len(s.tail)]
		if in.Op != want {
			return fmt.Errorf("tail out of order: got %v after %v", in.Op, s.tail)
		}
		s.tail = append(s.tail, in.Op)
	default:
		return fmt.Errorf("invalid op")
	}
	return nil
}

// partner returns the stage, chunk and op that must meet a transfer on
// chunk chunk of stage stage of a stages-deep pipeline: the neighbouring
// virtual stage, wrapping from the last stage to the first one chunk up.
// The result may be out of range (no such neighbour).
func partner(stage, chunk, stages int, op Op) (int, int, Op) {
	v := chunk*stages + stage
	var other int
	var want Op
	switch op {
	case SendActivation:
		other, want = v+1, RecvActivation
	case RecvActivation:
		other, want = v-1, SendActivation
	case SendGrad:
		other, want = v-1, RecvGrad
	default: // RecvGrad
		other, want = v+1, SendGrad
	}
	if other < 0 {
		return -1, 0, want
	}
	return other % stages, other / stages, want
}

// simulate runs the schedules of all stages in lockstep.
func simulate(scheds []Schedule, microBatches int, training bool) error {
	_, err := simulateChunks(scheds, microBatches, 1, training)
	return err
}

// simulateChunks runs the schedules of all stages, each holding virtual
// model chunks, in lockstep, and returns each stage's most buffers in use
// at once.
func simulateChunks(scheds []Schedule, microBatches, virtual int, training bool) ([]int, error) {
	stages := len(scheds)
	steps := make([][][]Instruction, stages)
	sims := make([]*stageSim, stages)
	for s, sc := range scheds {
		steps[s] = sc.Steps()
		sims[s] = newStageSim(s, stages, microBatches, virtual, sc.NumPipeBuffers(), training)
		if len(steps[s]) != len(steps[0]) {
			return nil, fmt.Errorf("stage %d has %d steps, stage 0 has %d", s, len(steps[s]), len(steps[0]))
		}
	}
	for t := range steps[0] {
		pc := make([]int, stages)
		for progress := true; progress; {
			progress = false
			for s := range stages {
				for pc[s] < len(steps[s][t]) {
					in := steps[s][t][pc[s]]
					if !in.Op.IsComm() {
						if !in.Op.HasBuffer() && t != len(steps[0])-1 {
							return nil, fmt.Errorf("step %d stage %d %v: end-of-batch op before the last step", t, s, in)
						}
						if err := sims[s].exec(in); err != nil {
							return nil, fmt.Errorf("step %d stage %d %v (mb %d): %v", t, s, in, in.MicroBatch, err)
						}
						pc[s]++
						progress = true
						continue
					}
					p, pchunk, want := partner(s, in.Chunk, stages, in.Op)
					if p < 0 || pchunk >= virtual {
						return nil, fmt.Errorf("step %d stage %d %v: no virtual stage to talk to", t, s, in)
					}
					at := pc[p]
					if p == s { // the ring closed on one stage: the Recv comes right after the Send
						if in.Op == RecvActivation || in.Op == RecvGrad {
							return nil, fmt.Errorf("step %d stage %d %v: a transfer to itself must start with its Send", t, s, in)
						}
						at++
					}
					if at >= len(steps[p][t]) || steps[p][t][at].Op != want {
						if p == s {
							return nil, fmt.Errorf("step %d stage %d %v: a transfer to itself must be followed by its %v", t, s, in, want)
						}
						break // blocked until the partner reaches the match
					}
					other := steps[p][t][at]
					if other.MicroBatch != in.MicroBatch || other.Chunk != pchunk {
						return nil, fmt.Errorf("step %d: stage %d %v carries micro-batch %d, stage %d %v carries %d (chunk %d, want %d)",
							t, s, in, in.MicroBatch, p, other, other.MicroBatch, other.Chunk, pchunk)
					}
					// The sender's side first: the data leaves before it lands.
					first, second := s, p
					fi, si := in, other
					if in.Op == RecvActivation || in.Op == RecvGrad {
						first, second, fi, si = p, s, other, in
					}
					if err := sims[first].exec(fi); err != nil {
						return nil, fmt.Errorf("step %d stage %d %v (mb %d): %v", t, first, fi, fi.MicroBatch, err)
					}
					if err := sims[second].exec(si); err != nil {
						return nil, fmt.Errorf("step %d stage %d %v (mb %d): %v", t, second, si, si.MicroBatch, err)
					}
					pc[s]++
					pc[p]++
					progress = true
				}
			}
		}
		for s := range stages {
			if pc[s] < len(steps[s][t]) {
				return nil, fmt.Errorf("step %d: deadlock, stage %d blocked at %v (%v)", t, s, steps[s][t][pc[s]], steps[s][t])
			}
		}
	}
	peaks := make([]int, stages)
	for s, sim := range sims {
		for c := range virtual {
			for mb := range microBatches {
				k := c*microBatches + mb
				if sim.forwarded[k] != 1 {
					return nil, fmt.Errorf("stage %d forwarded micro-batch %d (chunk %d) %d times", s, mb, c, sim.forwarded[k])
				}
				if training && sim.backwarded[k] != 1 {
					return nil, fmt.Errorf("stage %d backwarded micro-batch %d (chunk %d) %d times", s, mb, c, sim.backwarded[k])
				}
				want := 0
				if sim.first(c) || sim.last(c) {
					want = 1
				}
				if sim.loaded[k] != want {
					return nil, fmt.Errorf("stage %d loaded micro-batch %d (chunk %d) %d times", s, mb, c, sim.loaded[k])
				}
			}
		}
		if training && len(sim.tail) != 3 {
			return nil, fmt.Errorf("stage %d ended without the optimizer tail (%v)", s, sim.tail)
		}
		for i, b := range sim.bufs {
			if b.mb != -1 {
				return nil, fmt.Errorf("stage %d buffer %d still holds micro-batch %d (chunk %d) at the end", s, i, b.mb, b.chunk)
			}
		}
		peaks[s] = sim.peak
	}
	return peaks, nil
}

func TestSimulateLockstep(t *testing.T) {
	kinds := []struct {
		name     string
		ctor     func(int, int, int) (Schedule, error)
		training bool
	}{
		{"1F1B", NewTrainSchedule, true},
		{"GPipe", NewGPipeSchedule, true},
		{"Inference", NewInferenceSchedule, false},
	}
	for _, k := range kinds {
		for stages := 1; stages <= 4; stages++ {
			for mb := 1; mb <= 8; mb++ {
				scheds := make([]Schedule, stages)
				for s := range stages {
					var err error
					scheds[s], err = k.ctor(mb, stages, s)
					require.NoError(t, err)
				}
				assert.NoError(t, simulate(scheds, mb, k.training), "%s stages=%d micro_batches=%d", k.name, stages, mb)
			}
		}
	}
}

// TestSimulatorCatchesBrokenSchedules makes sure the simulator is not
// vacuous: each corruption of a valid schedule must be reported.
func TestSimulatorCatchesBrokenSchedules(t *testing.T) {
	corruptions := []struct {
		name string
		edit func(steps [][][]Instruction, nbuf []int)
	}{
		{"dropped recv", func(st [][][]Instruction, _ []int) { st[1][1] = st[1][1][1:] }},
		{"swapped send/recv order", func(st [][][]Instruction, _ []int) {
			// Stage 1 of 1F1B in step 2 receives a gradient from stage 2 and
			// sends an activation to it; reversing only one side deadlocks.
			for _, step := range st[1] {
				if len(step) >= 2 && step[0].Op == RecvGrad && step[1].Op == SendActivation {
					step[0], step[1] = step[1], step[0]
					return
				}
			}
			panic("no RecvGrad+SendActivation step on stage 1")
		}},
		{"one buffer too few", func(st [][][]Instruction, nbuf []int) {
			nbuf[0]--
			for _, step := range st[0] {
				for i := range step {
					if step[i].Op.HasBuffer() {
						step[i].BufferID = step[i].MicroBatch % nbuf[0]
					}
				}
			}
		}},
		{"wrong micro-batch sent", func(st [][][]Instruction, _ []int) { st[0][1][0].MicroBatch = 1 }},
		{"tail dropped", func(st [][][]Instruction, _ []int) {
			last := len(st[0]) - 1
			st[0][last] = st[0][last][:len(st[0][last])-1]
		}},
	}
	for _, c := range corruptions {
		const stages, mb = 3, 4
		steps := make([][][]Instruction, stages)
		nbuf := make([]int, stages)
		for s := range stages {
			sc, err := NewTrainSchedule(mb, stages, s)
			require.NoError(t, err)
			steps[s], nbuf[s] = sc.Steps(), sc.NumPipeBuffers()
		}
		c.edit(steps, nbuf)
		scheds := make([]Schedule, stages)
		for s := range stages {
			scheds[s] = fixedSchedule{steps[s], nbuf[s]}
		}
		if err := simulate(scheds, mb, true); assert.Error(t, err, "%s: simulator accepted a broken schedule", c.name) {
			t.Logf("%s: %v", c.name, err)
		}
	}
}

type fixedSchedule struct {
	steps [][]Instruction
	nbuf  int
}

func (f fixedSchedule) Steps() [][]Instruction { return f.steps }
func (f fixedSchedule) NumPipeBuffers() int    { return f.nbuf }
