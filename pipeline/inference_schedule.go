package pipeline

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
