package pipeline

import "fmt"

// interleavedSchedule is Megatron-LM's interleaved 1F1B schedule
// (forward_backward_pipelining_with_interleaving): each of the stages holds
// virtual model chunks, chunk c of stage s being virtual stage c*stages+s,
// so a micro-batch crosses the pipeline virtual times, wrapping from the
// last stage back to the first between chunks.
type interleavedSchedule struct {
	shape
	virtual int
}

// NewInterleavedSchedule returns Megatron's interleaved 1F1B training
// schedule for stage stageID of a stages-deep pipeline whose stages each
// hold virtualStages model chunks, running microBatches micro-batches per
// optimizer step (pipeline_schedule {"type": "Interleaved",
// "virtual_stages": virtualStages}). microBatches must be a multiple of
// stages: Megatron runs micro-batches through the chunks in groups of
// stages.
//
// Each stage computes in Megatron's order. Its k-th forward (k counts
// micro-batch/chunk pairs, 0 <= k < microBatches*virtualStages) is on
// chunk (k mod (stages*virtualStages)) / stages and micro-batch
// (k / (stages*virtualStages))*stages + k mod stages; its k-th backward is
// on the same micro-batch and the mirrored chunk virtualStages-1-chunk. It
// first runs
//
//	warmup = min(2*(stages-stageID-1) + (virtualStages-1)*stages, microBatches*virtualStages)
//
// forwards, then alternates one forward and one backward, then runs the
// remaining backwards. (Megatron-LM also special-cases microBatches ==
// stages to run every forward as warmup; this schedule keeps the formula
// there too, which holds fewer activations and is equally valid.) Each step holds at most one ForwardPass or
// BackwardPass; the step a pass runs in is the earliest that both the
// stage's previous pass and the pass it depends on (the same micro-batch on
// the neighbouring virtual stage) allow.
//
// Transfers: an activation goes from (stage s, chunk c) to (s+1, c), or
// from (stages-1, c) to (0, c+1); gradients go the reverse way. An
// activation moves in the step its consumer runs forward; a gradient moves
// in the step after its producer ran backward. Every transfer of a step
// comes before the step's pass, gradients before activations, and among
// each kind in the order of the sending stage, which is one global order,
// so blocking send/recv pairs cannot deadlock. With a single stage the ring
// closes on the stage itself: a SendActivation or SendGrad is immediately
// followed by its RecvActivation or RecvGrad, which the engine executes as
// a local copy.
//
// LoadMicroBatch appears on virtual stage 0 (stage 0, chunk 0: inputs) and
// on the last virtual stage (stage stages-1, chunk virtualStages-1:
// labels). Instructions carry the chunk in Instruction.Chunk.
//
// virtualStages 1 is accepted and gives a plain 1F1B order with Megatron's
// interleaved warmup depth 2*(stages-stageID-1); [NewTraining] insists on
// at least 2.
func NewInterleavedSchedule(virtualStages, microBatches, stages, stageID int) (Schedule, error) {
	if err := checkShape(microBatches, stages, stageID); err != nil {
		return nil, err
	}
	if virtualStages < 1 {
		return nil, argError("virtualStages (pipeline_schedule.virtual_stages)", virtualStages, "must be at least 1")
	}
	if microBatches%stages != 0 {
		return nil, fmt.Errorf("%w: microBatches must be a multiple of stages for the Interleaved schedule, got microBatches=%d, stages=%d",
			ErrInvalidArgument, microBatches, stages)
	}
	return interleavedSchedule{shape{microBatches, stages, stageID}, virtualStages}, nil
}

// interleavedWarmup is Megatron's number of warmup forwards on stage
// stageID (get_pp_rank_microbatches with microbatch_group_size_per_vp_stage
// equal to stages), capped at the stage's microBatches*virtual passes.
func interleavedWarmup(virtual, microBatches, stages, stageID int) int {
	return min(2*(stages-stageID-1)+(virtual-1)*stages, microBatches*virtual)
}

// NumPipeBuffers is min(warmup+1, microBatches*virtualStages): the
// stage's micro-batch/chunk pairs whose forward has run (or whose input has
// arrived) and whose backward has not finished, at the worst point of the
// steady state. A buffer is taken by the activation arriving for a forward
// (or the load on virtual stage 0) and freed when the input gradient is sent
// (or, on virtual stage 0, by the backward itself).
func (s interleavedSchedule) NumPipeBuffers() int {
	total := s.microBatches * s.virtual
	return min(interleavedWarmup(s.virtual, s.microBatches, s.stages, s.stageID)+1, total)
}

// pass is one forward or backward of a micro-batch on a chunk.
type pass struct {
	forward   bool
	mb, chunk int
}

// interleavedOrder is the stage's compute order, Megatron's.
func (s interleavedSchedule) interleavedOrder(stageID int) []pass {
	total := s.microBatches * s.virtual
	group := s.stages * s.virtual
	at := func(k int, forward bool) pass {
		chunk := k % group / s.stages
		if !forward {
			chunk = s.virtual - 1 - chunk
		}
		return pass{forward, k/group*s.stages + k%s.stages, chunk}
	}
	warmup := interleavedWarmup(s.virtual, s.microBatches, s.stages, stageID)
	order := make([]pass, 0, 2*total)
	for k := range warmup {
		order = append(order, at(k, true))
	}
	for k := range total - warmup {
		order = append(order, at(k+warmup, true), at(k, false))
	}
	for k := total - warmup; k < total; k++ {
		order = append(order, at(k, false))
	}
	return order
}

// timetable returns, for every stage and every entry of its compute order,
// the step the pass runs in: the earliest step after the stage's previous
// pass and after the pass it depends on (forward: the same micro-batch's
// forward on the previous virtual stage; backward: its own forward and the
// backward on the next virtual stage).
func (s interleavedSchedule) timetable() (orders [][]pass, times [][]int) {
	vstages := s.stages * s.virtual
	orders = make([][]pass, s.stages)
	times = make([][]int, s.stages)
	// done[forward][virtual stage][mb] is the step a pass ran in, or -1.
	var done [2][][]int
	for f := range done {
		done[f] = make([][]int, vstages)
		for v := range done[f] {
			done[f][v] = make([]int, s.microBatches)
			for mb := range done[f][v] {
				done[f][v][mb] = -1
			}
		}
	}
	idx := func(forward bool) int {
		if forward {
			return 1
		}
		return 0
	}
	for st := range s.stages {
		orders[st] = s.interleavedOrder(st)
		times[st] = make([]int, len(orders[st]))
	}
	pc := make([]int, s.stages)
	for remaining := 2 * vstages * s.microBatches; remaining > 0; {
		progress := false
		for st := range s.stages {
			for pc[st] < len(orders[st]) {
				p := orders[st][pc[st]]
				v := p.chunk*s.stages + st
				t := 0
				if pc[st] > 0 {
					t = times[st][pc[st]-1] + 1
				}
				var deps []int
				if p.forward {
					if v > 0 {
						deps = append(deps, done[1][v-1][p.mb])
					}
				} else {
					deps = append(deps, done[1][v][p.mb])
					if v < vstages-1 {
						deps = append(deps, done[0][v+1][p.mb])
					}
				}
				ready := true
				for _, d := range deps {
					if d < 0 {
						ready = false
						break
					}
					t = max(t, d+1)
				}
				if !ready {
					break
				}
				times[st][pc[st]] = t
				done[idx(p.forward)][v][p.mb] = t
				pc[st]++
				remaining--
				progress = true
			}
		}
		if !progress {
			// Megatron's order is acyclic for every shape NewInterleavedSchedule
			// accepts; reaching here is a bug in this file.
			panic(fmt.Sprintf("pipeline: interleaved schedule has a dependency cycle (virtual=%d, micro-batches=%d, stages=%d)",
				s.virtual, s.microBatches, s.stages))
		}
	}
	return orders, times
}

// transfer is one point-to-point transfer of a step.
type transfer struct {
	grad                         bool
	from, to                     int // physical stages
	fromChunk, toChunk, mb, step int
}

// Steps implements [Schedule].
func (s interleavedSchedule) Steps() [][]Instruction {
	orders, times := s.timetable()
	// Place every transfer and find the number of steps.
	var xfers []transfer
	last := 0
	for st := range s.stages {
		for i, p := range orders[st] {
			t := times[st][i]
			last = max(last, t)
			v := p.chunk*s.stages + st
			if p.forward && v > 0 {
				pv := v - 1
				xfers = append(xfers, transfer{false, pv % s.stages, st, pv / s.stages, p.chunk, p.mb, t})
			}
			if !p.forward && v > 0 {
				pv := v - 1
				xfers = append(xfers, transfer{true, st, pv % s.stages, p.chunk, pv / s.stages, p.mb, t + 1})
				last = max(last, t+1)
			}
		}
	}
	steps := make([][]Instruction, last+1)
	for i := range steps {
		steps[i] = []Instruction{}
	}
	// Transfers of the stage, per step, in the global order: gradients
	// before activations, then by sending stage.
	byStep := make([][]transfer, last+1)
	for _, x := range xfers {
		if x.from == s.stageID || x.to == s.stageID {
			byStep[x.step] = append(byStep[x.step], x)
		}
	}
	rank := func(x transfer) int {
		r := x.from
		if !x.grad {
			r += s.stages
		}
		return r
	}
	for _, list := range byStep {
		for i := 1; i < len(list); i++ { // insertion sort: at most 4 entries
			for j := i; j > 0 && rank(list[j]) < rank(list[j-1]); j-- {
				list[j], list[j-1] = list[j-1], list[j]
			}
		}
	}
	// Buffers: a (micro-batch, chunk) pair takes the lowest free buffer
	// when it first appears and gives it back when its input gradient
	// leaves (on virtual stage 0, after its backward).
	nbuf := s.NumPipeBuffers()
	owner := make([]int, nbuf) // key mb*virtual+chunk, or -1
	for i := range owner {
		owner[i] = -1
	}
	bufOf := func(mb, chunk int) int {
		key := mb*s.virtual + chunk
		free := -1
		for b, o := range owner {
			if o == key {
				return b
			}
			if o == -1 && free == -1 {
				free = b
			}
		}
		if free == -1 {
			panic(fmt.Sprintf("pipeline: interleaved schedule needs more than %d buffers on stage %d", nbuf, s.stageID))
		}
		owner[free] = key
		return free
	}
	release := func(b int) { owner[b] = -1 }
	emit := func(t int, op Op, mb, chunk int) int {
		b := bufOf(mb, chunk)
		steps[t] = append(steps[t], Instruction{Op: op, BufferID: b, MicroBatch: mb, Chunk: chunk})
		return b
	}
	vlast := s.stages*s.virtual - 1
	next := 0 // index into orders[s.stageID]
	for t := range steps {
		for _, x := range byStep[t] {
			sendOp, recvOp := SendActivation, RecvActivation
			if x.grad {
				sendOp, recvOp = SendGrad, RecvGrad
			}
			if x.from == s.stageID {
				b := emit(t, sendOp, x.mb, x.fromChunk)
				if x.grad {
					release(b)
				}
			}
			if x.to == s.stageID {
				emit(t, recvOp, x.mb, x.toChunk)
			}
		}
		mine := orders[s.stageID]
		if next < len(mine) && times[s.stageID][next] == t {
			p := mine[next]
			next++
			v := p.chunk*s.stages + s.stageID
			if p.forward {
				if v == 0 || v == vlast {
					emit(t, LoadMicroBatch, p.mb, p.chunk)
				}
				emit(t, ForwardPass, p.mb, p.chunk)
			} else if b := emit(t, BackwardPass, p.mb, p.chunk); v == 0 {
				release(b)
			}
		}
	}
	steps[last] = append(steps[last], stepEnd()...)
	return steps
}
