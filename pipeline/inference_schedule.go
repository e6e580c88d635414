package pipeline

import "strings"

// inferenceSchedule is DeepSpeed's InferenceSchedule: forward only, one
// micro-batch per step per stage, double-buffered.
type inferenceSchedule struct{ shape }

// NewInferenceSchedule returns DeepSpeed's forward-only schedule for stage
// stageID of a stages-deep pipeline evaluating microBatches micro-batches.
// It has microBatches+stages-1 steps and always 2 buffers, used in turn:
// each step receives into one and sends the previous step's output from the
// other. Even stages send before they receive and odd stages receive before
// they send, so blocking transfers between neighbours pair up.
func NewInferenceSchedule(microBatches, stages, stageID int) (Schedule, error) {
	if err := checkShape(microBatches, stages, stageID); err != nil {
		return nil, err
	}
	return inferenceSchedule{shape{microBatches, stages, stageID}}, nil
}

// NumPipeBuffers is always 2.
func (s inferenceSchedule) NumPipeBuffers() int { return 2 }

// Steps implements [Schedule].
func (s inferenceSchedule) Steps() [][]Instruction {
	total := s.microBatches + s.stages - 1
	hasPrev, hasNext := !s.isFirst(), !s.isLast()
	evenStage := s.stageID%2 == 0
	steps := make([][]Instruction, 0, total)
	for t := range total {
		mb := t - s.stageID
		recvBuf, sendBuf := t%2, (t+1)%2
		if !evenStage {
			recvBuf, sendBuf = sendBuf, recvBuf
		}
		cmds := []Instruction{}
		if (s.isFirst() || s.isLast()) && s.validMicroBatch(mb) {
			cmds = append(cmds, buffered(LoadMicroBatch, recvBuf, mb))
		}
		send := hasNext && s.validMicroBatch(mb-1)
		recv := hasPrev && s.validMicroBatch(mb)
		if evenStage && send {
			cmds = append(cmds, buffered(SendActivation, sendBuf, mb-1))
		}
		if recv {
			cmds = append(cmds, buffered(RecvActivation, recvBuf, mb))
		}
		if !evenStage && send {
			cmds = append(cmds, buffered(SendActivation, sendBuf, mb-1))
		}
		if s.validMicroBatch(mb) {
			cmds = append(cmds, buffered(ForwardPass, recvBuf, mb))
		}
		steps = append(steps, cmds)
	}
	return steps
}

// NewInference returns the forward-only schedule that evaluates
// microBatches micro-batches on stage stageID of a pipeline trained under
// scheduleType with virtualStages model chunks per stage (the arguments
// of [NewTraining]). A stage holding one chunk (1F1B, GPipe) runs
// DeepSpeed's InferenceSchedule, as DeepSpeed's eval_batch does whatever
// the training schedule. A stage holding several (Interleaved) runs the
// interleaved schedule's forward half ([ForwardOnly]): its forwards and
// activation transfers in its order, so microBatches must then be a
// multiple of stages, as for training.
func NewInference(scheduleType string, virtualStages, microBatches, stages, stageID int) (Schedule, error) {
	s, err := NewTraining(scheduleType, virtualStages, microBatches, stages, stageID)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(scheduleType, ScheduleInterleaved) {
		return ForwardOnly(s), nil
	}
	return NewInferenceSchedule(microBatches, stages, stageID)
}

// ForwardOnly returns training schedule s without its backward half: each
// step keeps only its LoadMicroBatch, RecvActivation, SendActivation and
// ForwardPass, in their order. Every step stays (an emptied step is an
// idle one), so the stages still run in lockstep, and the activation
// transfers that remain pair up as in s: dropping both ends of every
// gradient transfer cannot block a send or receive that s completes. A
// buffer is free once its activation is sent (or, on the last virtual
// stage, once its forward ran); NumPipeBuffers is s's.
func ForwardOnly(s Schedule) Schedule { return forwardOnly{s} }

type forwardOnly struct{ s Schedule }

// NumPipeBuffers is the training schedule's.
func (f forwardOnly) NumPipeBuffers() int { return f.s.NumPipeBuffers() }

// Steps implements [Schedule].
func (f forwardOnly) Steps() [][]Instruction {
	steps := f.s.Steps()
	for t, step := range steps {
		kept := []Instruction{}
		for _, in := range step {
			switch in.Op {
			case LoadMicroBatch, RecvActivation, SendActivation, ForwardPass:
				kept = append(kept, in)
			}
		}
		steps[t] = kept
	}
	return steps
}
