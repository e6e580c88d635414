package pipeline

// trainSchedule is DeepSpeed's TrainSchedule: one forward, one backward
// (1F1B). Steps alternate forward and backward, and neighbouring stages are
// always in opposite phases, so a forward step's SendGrad/RecvActivation
// meet the neighbour's RecvGrad/SendActivation in the same step.
type trainSchedule struct{ shape }

// NewTrainSchedule returns DeepSpeed's 1F1B training schedule for stage
// stageID of a stages-deep pipeline running microBatches micro-batches per
// optimizer step. It has 2*(microBatches+stages-1) steps and
// max(2, min(stages-stageID, microBatches)) buffers.
func NewTrainSchedule(microBatches, stages, stageID int) (Schedule, error) {
	if err := checkShape(microBatches, stages, stageID); err != nil {
		return nil, err
	}
	return trainSchedule{shape{microBatches, stages, stageID}}, nil
}

// NumPipeBuffers is the most micro-batches in flight on the stage (stages
// behind it, bounded by the micro-batch count), and at least 2.
func (s trainSchedule) NumPipeBuffers() int {
	return max(2, min(s.stages-s.stageID, s.microBatches))
}

// Steps implements [Schedule].
func (s trainSchedule) Steps() [][]Instruction {
	total := 2 * (s.microBatches + s.stages - 1)
	nbuf := s.NumPipeBuffers()
	hasPrev, hasNext := !s.isFirst(), !s.isLast()
	steps := make([][]Instruction, 0, total)
	prev := -1 // micro-batch of the previous step
	for t := range total {
		mb, forward := s.microBatchAt(t)
		valid, prevValid := s.validMicroBatch(mb), s.validMicroBatch(prev)
		cmds := []Instruction{}
		if forward {
			if prevValid && hasPrev {
				cmds = append(cmds, buffered(SendGrad, prev%nbuf, prev))
			}
			if valid && hasPrev {
				cmds = append(cmds, buffered(RecvActivation, mb%nbuf, mb))
			}
		} else {
			if valid && hasNext {
				cmds = append(cmds, buffered(RecvGrad, mb%nbuf, mb))
			}
			if prevValid && hasNext {
				cmds = append(cmds, buffered(SendActivation, prev%nbuf, prev))
			}
		}
		if forward && valid && (s.isFirst() || s.isLast()) {
			cmds = append(cmds, buffered(LoadMicroBatch, mb%nbuf, mb))
		}
		if valid {
			op := BackwardPass
			if forward {
				op = ForwardPass
			}
			cmds = append(cmds, buffered(op, mb%nbuf, mb))
		}
		if t == total-1 {
			cmds = append(cmds, stepEnd()...)
		}
		steps = append(steps, cmds)
		prev = mb
	}
	return steps
}

// microBatchAt maps step t to the micro-batch it works on (possibly out of
// range: an idle half-step) and whether it is a forward step. Even stages
// go forward on even steps, odd stages on odd steps.
func (s trainSchedule) microBatchAt(t int) (mb int, forward bool) {
	evenStep, evenStage := t%2 == 0, s.stageID%2 == 0
	switch {
	case evenStep && evenStage:
		return t/2 - s.stageID/2, true
	case !evenStep && !evenStage:
		return (t-1)/2 - s.stageID/2, true
	case evenStep && !evenStage:
		return t/2 - s.stages + (s.stageID+1)/2, false
	default: // odd step, even stage
		return (t-1)/2 - s.stages + 1 + s.stageID/2, false
	}
}
