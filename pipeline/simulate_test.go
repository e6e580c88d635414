package pipeline

import (
	"fmt"
	"testing"
)

// The simulator runs every stage's schedule in lockstep the way an engine
// with blocking point-to-point transfers would, and checks the data flow:
// each Send meets the matching Recv of the same micro-batch on the
// neighbour in the same step, in an order that cannot deadlock; no buffer
// is overwritten while it holds a live micro-batch; each micro-batch is
// loaded, forwarded (and, when training, backwarded) exactly once per
// stage, in dependency order; and the optimizer tail closes the batch.

// slot is what one pipeline buffer of one stage holds.
type slot struct {
	mb                     int // -1 when free
	input, output, outGrad bool
	backwarded             bool
}

type stageSim struct {
	id, stages, microBatches int
	training                 bool
	bufs                     []slot
	loaded, forwarded        []int
	backwarded               []int
	tail                     []Op
}

func newStageSim(id, stages, microBatches, nbuf int, training bool) *stageSim {
	s := &stageSim{id: id, stages: stages, microBatches: microBatches, training: training,
		bufs:   make([]slot, nbuf),
		loaded: make([]int, microBatches), forwarded: make([]int, microBatches), backwarded: make([]int, microBatches)}
	for i := range s.bufs {
		s.bufs[i].mb = -1
	}
	return s
}

func (s *stageSim) first() bool { return s.id == 0 }
func (s *stageSim) last() bool  { return s.id == s.stages-1 }

// claim makes buffer b hold micro-batch mb, failing if it holds another
// live one.
func (s *stageSim) claim(in Instruction) (*slot, error) {
	if in.BufferID < 0 || in.BufferID >= len(s.bufs) {
		return nil, fmt.Errorf("buffer %d outside [0, %d)", in.BufferID, len(s.bufs))
	}
	b := &s.bufs[in.BufferID]
	if b.mb != -1 && b.mb != in.MicroBatch {
		return nil, fmt.Errorf("buffer %d still holds live micro-batch %d", in.BufferID, b.mb)
	}
	if b.mb == -1 {
		*b = slot{mb: in.MicroBatch}
	}
	return b, nil
}

// holding returns buffer b if it holds micro-batch mb.
func (s *stageSim) holding(in Instruction) (*slot, error) {
	if in.BufferID < 0 || in.BufferID >= len(s.bufs) {
		return nil, fmt.Errorf("buffer %d outside [0, %d)", in.BufferID, len(s.bufs))
	}
	b := &s.bufs[in.BufferID]
	if b.mb != in.MicroBatch {
		return nil, fmt.Errorf("buffer %d holds micro-batch %d, not %d", in.BufferID, b.mb, in.MicroBatch)
	}
	return b, nil
}

// exec applies one instruction (transfers as already paired).
func (s *stageSim) exec(in Instruction) error {
	if in.Op.HasBuffer() && (in.MicroBatch < 0 || in.MicroBatch >= s.microBatches) {
		return fmt.Errorf("micro-batch %d outside [0, %d)", in.MicroBatch, s.microBatches)
	}
	if len(s.tail) > 0 && in.Op.HasBuffer() {
		return fmt.Errorf("after %v", s.tail)
	}
	switch in.Op {
	case LoadMicroBatch:
		if !s.first() && !s.last() {
			return fmt.Errorf("load on a middle stage")
		}
		if _, err := s.claim(in); err != nil {
			return err
		}
		s.loaded[in.MicroBatch]++
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
		if s.first() && s.loaded[in.MicroBatch] == 0 || !s.first() && !b.input {
			return fmt.Errorf("forward before its input arrived")
		}
		if s.last() && s.loaded[in.MicroBatch] == 0 {
			return fmt.Errorf("forward on the last stage before its labels were loaded")
		}
		if s.forwarded[in.MicroBatch]++; s.forwarded[in.MicroBatch] > 1 {
			return fmt.Errorf("micro-batch forwarded twice")
		}
		b.output = true
		if !s.training && s.last() {
			*b = slot{mb: -1}
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
			*b = slot{mb: -1}
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
		if !b.output || !s.last() && !b.outGrad {
			return fmt.Errorf("backward before forward or before its output gradient arrived")
		}
		if s.backwarded[in.MicroBatch]++; s.backwarded[in.MicroBatch] > 1 {
			return fmt.Errorf("micro-batch backwarded twice")
		}
		b.backwarded = true
		if s.first() { // no input gradient to send: the buffer is free
			*b = slot{mb: -1}
		}
	case SendGrad:
		b, err := s.holding(in)
		if err != nil {
			return err
		}
		if !b.backwarded {
			return fmt.Errorf("input gradient sent before backward")
		}
		*b = slot{mb: -1}
	case ReduceTiedGrads, ReduceGrads, OptimizerStep:
		if !s.training {
			return fmt.Errorf("optimizer op in an inference schedule")
		}
		for mb, n := range s.backwarded {
			if n != 1 {
				return fmt.Errorf("micro-batch %d backwarded %d times before the optimizer tail", mb, n)
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

// partner returns the stage and op that must meet a transfer.
func partner(stage int, op Op) (int, Op) {
	switch op {
	case SendActivation:
		return stage + 1, RecvActivation
	case RecvActivation:
		return stage - 1, SendActivation
	case SendGrad:
		return stage - 1, RecvGrad
	default: // RecvGrad
		return stage + 1, SendGrad
	}
}

// simulate runs the schedules of all stages in lockstep.
func simulate(scheds []Schedule, microBatches int, training bool) error {
	stages := len(scheds)
	steps := make([][][]Instruction, stages)
	sims := make([]*stageSim, stages)
	for s, sc := range scheds {
		steps[s] = sc.Steps()
		sims[s] = newStageSim(s, stages, microBatches, sc.NumPipeBuffers(), training)
		if len(steps[s]) != len(steps[0]) {
			return fmt.Errorf("stage %d has %d steps, stage 0 has %d", s, len(steps[s]), len(steps[0]))
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
						if err := sims[s].exec(in); err != nil {
							return fmt.Errorf("step %d stage %d %v (mb %d): %v", t, s, in, in.MicroBatch, err)
						}
						pc[s]++
						progress = true
						continue
					}
					p, want := partner(s, in.Op)
					if p < 0 || p >= stages {
						return fmt.Errorf("step %d stage %d %v: no stage %d to talk to", t, s, in, p)
					}
					if pc[p] >= len(steps[p][t]) || steps[p][t][pc[p]].Op != want {
						break // blocked until the partner reaches the match
					}
					other := steps[p][t][pc[p]]
					if other.MicroBatch != in.MicroBatch {
						return fmt.Errorf("step %d: stage %d %v carries micro-batch %d, stage %d %v carries %d",
							t, s, in, in.MicroBatch, p, other, other.MicroBatch)
					}
					// The sender's side first: the data leaves before it lands.
					first, second := s, p
					fi, si := in, other
					if in.Op == RecvActivation || in.Op == RecvGrad {
						first, second, fi, si = p, s, other, in
					}
					if err := sims[first].exec(fi); err != nil {
						return fmt.Errorf("step %d stage %d %v (mb %d): %v", t, first, fi, fi.MicroBatch, err)
					}
					if err := sims[second].exec(si); err != nil {
						return fmt.Errorf("step %d stage %d %v (mb %d): %v", t, second, si, si.MicroBatch, err)
					}
					pc[s]++
					pc[p]++
					progress = true
				}
			}
		}
		for s := range stages {
			if pc[s] < len(steps[s][t]) {
				return fmt.Errorf("step %d: deadlock, stage %d blocked at %v (%v)", t, s, steps[s][t][pc[s]], steps[s][t])
			}
		}
	}
	for s, sim := range sims {
		for mb := range microBatches {
			if sim.forwarded[mb] != 1 {
				return fmt.Errorf("stage %d forwarded micro-batch %d %d times", s, mb, sim.forwarded[mb])
			}
			if training && sim.backwarded[mb] != 1 {
				return fmt.Errorf("stage %d backwarded micro-batch %d %d times", s, mb, sim.backwarded[mb])
			}
			if (sim.first() || sim.last()) && sim.loaded[mb] != 1 {
				return fmt.Errorf("stage %d loaded micro-batch %d %d times", s, mb, sim.loaded[mb])
			}
		}
		if training && len(sim.tail) != 3 {
			return fmt.Errorf("stage %d ended without the optimizer tail (%v)", s, sim.tail)
		}
		for i, b := range sim.bufs {
			if b.mb != -1 {
				return fmt.Errorf("stage %d buffer %d still holds micro-batch %d at the end", s, i, b.mb)
			}
		}
	}
	return nil
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
					if scheds[s], err = k.ctor(mb, stages, s); err != nil {
						t.Fatal(err)
					}
				}
				if err := simulate(scheds, mb, k.training); err != nil {
					t.Errorf("%s stages=%d micro_batches=%d: %v", k.name, stages, mb, err)
				}
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
			if err != nil {
				t.Fatal(err)
			}
			steps[s], nbuf[s] = sc.Steps(), sc.NumPipeBuffers()
		}
		c.edit(steps, nbuf)
		scheds := make([]Schedule, stages)
		for s := range stages {
			scheds[s] = fixedSchedule{steps[s], nbuf[s]}
		}
		if err := simulate(scheds, mb, true); err == nil {
			t.Errorf("%s: simulator accepted a broken schedule", c.name)
		} else {
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
