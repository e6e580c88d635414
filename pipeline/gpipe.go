package pipeline

// gpipeSchedule is deepgo's GPipe schedule: a forward phase that pushes
// every micro-batch through the pipeline, then a backward phase that pulls
// every gradient back, then the optimizer step. It is not a DeepSpeed
// schedule; it trades 1F1B's bounded activation memory (microBatches
// buffers instead of at most stages) for a simpler, phase-separated order.
type gpipeSchedule struct{ shape }

// NewGPipeSchedule returns the GPipe training schedule for stage stageID of
// a stages-deep pipeline running microBatches micro-batches per optimizer
// step (pipeline_schedule "GPipe").
//
// It has 2*(microBatches+stages-1) steps, like 1F1B. In forward step t the
// stage forwards micro-batch t-stageID and sends the previous step's output
// on; in backward step u it runs backward on micro-batch
// u-(stages-1-stageID), in ascending order, and sends the previous step's
// input gradient back. Each step sends before it receives. Micro-batch m
// lives in buffer m, so the stage needs microBatches buffers.
func NewGPipeSchedule(microBatches, stages, stageID int) (Schedule, error) {
	if err := checkShape(microBatches, stages, stageID); err != nil {
		return nil, err
	}
	return gpipeSchedule{shape{microBatches, stages, stageID}}, nil
}

// NumPipeBuffers is microBatches: every activation is kept until its
// backward pass.
func (s gpipeSchedule) NumPipeBuffers() int { return s.microBatches }

// Steps implements [Schedule].
func (s gpipeSchedule) Steps() [][]Instruction {
	phase := s.microBatches + s.stages - 1
	steps := make([][]Instruction, 0, 2*phase)
	for t := range phase {
		mb := t - s.stageID
		cmds := []Instruction{}
		if !s.isLast() && s.validMicroBatch(mb-1) {
			cmds = append(cmds, buffered(SendActivation, mb-1, mb-1))
		}
		if s.validMicroBatch(mb) {
			if !s.isFirst() {
				cmds = append(cmds, buffered(RecvActivation, mb, mb))
			}
			if s.isFirst() || s.isLast() {
				cmds = append(cmds, buffered(LoadMicroBatch, mb, mb))
			}
			cmds = append(cmds, buffered(ForwardPass, mb, mb))
		}
		steps = append(steps, cmds)
	}
	for u := range phase {
		mb := u - (s.stages - 1 - s.stageID)
		cmds := []Instruction{}
		if !s.isFirst() && s.validMicroBatch(mb-1) {
			cmds = append(cmds, buffered(SendGrad, mb-1, mb-1))
		}
		if s.validMicroBatch(mb) {
			if !s.isLast() {
				cmds = append(cmds, buffered(RecvGrad, mb, mb))
			}
			cmds = append(cmds, buffered(BackwardPass, mb, mb))
		}
		if u == phase-1 {
			cmds = append(cmds, stepEnd()...)
		}
		steps = append(steps, cmds)
	}
	return steps
}
