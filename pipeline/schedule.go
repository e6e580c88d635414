package pipeline

import (
	"errors"
	"fmt"
	"strings"
)

// Op is the kind of an [Instruction]. Its names are DeepSpeed's instruction
// classes (deepspeed/runtime/pipe/schedule.py).
type Op int

// The instructions a pipeline schedule emits. The zero Op is invalid.
const (
	// LoadMicroBatch loads the next micro-batch from the data iterator into
	// a buffer (inputs on the first stage, labels on the last).
	LoadMicroBatch Op = iota + 1
	// ForwardPass runs the stage's layers forward on a buffer.
	ForwardPass
	// BackwardPass runs the stage's layers backward on a buffer.
	BackwardPass
	// SendActivation sends a buffer's output activations to the next stage.
	SendActivation
	// RecvActivation receives input activations from the previous stage.
	RecvActivation
	// SendGrad sends the gradient of a buffer's inputs to the previous stage.
	SendGrad
	// RecvGrad receives the gradient of a buffer's outputs from the next stage.
	RecvGrad
	// ReduceTiedGrads all-reduces the gradients of weights tied across stages.
	ReduceTiedGrads
	// ReduceGrads all-reduces gradients across data-parallel ranks.
	ReduceGrads
	// OptimizerStep applies the optimizer.
	OptimizerStep
)

var opNames = [...]string{
	LoadMicroBatch:  "LoadMicroBatch",
	ForwardPass:     "ForwardPass",
	BackwardPass:    "BackwardPass",
	SendActivation:  "SendActivation",
	RecvActivation:  "RecvActivation",
	SendGrad:        "SendGrad",
	RecvGrad:        "RecvGrad",
	ReduceTiedGrads: "ReduceTiedGrads",
	ReduceGrads:     "ReduceGrads",
	OptimizerStep:   "OptimizerStep",
}

// String returns DeepSpeed's class name for the op, or "Op(n)" if invalid.
func (o Op) String() string {
	if o > 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// ParseOp returns the Op whose DeepSpeed class name is name.
func ParseOp(name string) (Op, error) {
	for o := LoadMicroBatch; o <= OptimizerStep; o++ {
		if opNames[o] == name {
			return o, nil
		}
	}
	return 0, fmt.Errorf("pipeline: unknown instruction %q", name)
}

// HasBuffer reports whether instructions of this op name a buffer (and a
// micro-batch). ReduceTiedGrads, ReduceGrads and OptimizerStep do not.
func (o Op) HasBuffer() bool { return o >= LoadMicroBatch && o <= RecvGrad }

// IsComm reports whether the op is a point-to-point transfer with a
// neighbouring stage.
func (o Op) IsComm() bool { return o >= SendActivation && o <= RecvGrad }

// Instruction is one action of one stage in one step.
type Instruction struct {
	// Op is what to do.
	Op Op
	// BufferID is the pipeline buffer the op works on, in
	// [0, NumPipeBuffers()); -1 when Op.HasBuffer() is false.
	BufferID int
	// MicroBatch is the micro-batch (0-based, within the batch) held in the
	// buffer; -1 when Op.HasBuffer() is false. DeepSpeed does not carry it;
	// it is here so engines and tests can check what a buffer holds.
	MicroBatch int
	// Chunk is the model chunk (virtual stage) of the stage the op runs on:
	// chunk c of stage s of an S-stage pipeline is virtual stage c*S+s. It
	// is 0 for every schedule but the interleaved one, and for ops without
	// a buffer.
	Chunk int
}

// String formats the instruction like DeepSpeed's repr:
// "ForwardPass(buffer_id=0)" or "OptimizerStep()". A non-zero Chunk is
// appended: "ForwardPass(buffer_id=0, chunk=1)".
func (in Instruction) String() string {
	if in.Op.HasBuffer() {
		if in.Chunk != 0 {
			return fmt.Sprintf("%s(buffer_id=%d, chunk=%d)", in.Op, in.BufferID, in.Chunk)
		}
		return fmt.Sprintf("%s(buffer_id=%d)", in.Op, in.BufferID)
	}
	return in.Op.String() + "()"
}

// Schedule is the per-stage instruction stream of a pipeline schedule.
// Implementations are immutable values, safe for concurrent use.
type Schedule interface {
	// Steps returns every step in execution order; step i of all stages of
	// the pipeline runs concurrently. An empty step is an idle step and must
	// still be taken. The result is freshly allocated on each call.
	Steps() [][]Instruction
	// NumPipeBuffers is how many activation buffers the stage needs; every
	// BufferID in Steps is below it.
	NumPipeBuffers() int
}

// ErrInvalidArgument is wrapped by the errors returned for out-of-range
// schedule and partition arguments; the message names the argument.
var ErrInvalidArgument = errors.New("pipeline: invalid argument")

// ErrNotSupported is wrapped by the errors returned for schedules deepgo
// does not implement yet. No schedule returns it today; it is kept so that
// callers matching on it keep compiling.
var ErrNotSupported = errors.New("pipeline: not supported yet")

// Names of the training schedules, as pipeline_schedule.type spells them
// (config.PipelineSchedule). Matching is case-insensitive.
const (
	Schedule1F1B        = "1F1B"
	ScheduleGPipe       = "GPipe"
	ScheduleInterleaved = "Interleaved"
)

// NewTraining returns the training schedule named by scheduleType (one of
// Schedule1F1B, ScheduleGPipe, ScheduleInterleaved; "" means 1F1B) for stage
// stageID of a stages-deep pipeline running microBatches micro-batches per
// optimizer step. virtualStages is pipeline_schedule.virtual_stages and must
// be 1 except for Interleaved, which needs at least 2 (see
// [NewInterleavedSchedule]; it also needs microBatches to be a multiple of
// stages).
func NewTraining(scheduleType string, virtualStages, microBatches, stages, stageID int) (Schedule, error) {
	if virtualStages < 1 {
		return nil, argError("virtualStages (pipeline_schedule.virtual_stages)", virtualStages, "must be at least 1")
	}
	switch {
	case scheduleType == "" || strings.EqualFold(scheduleType, Schedule1F1B):
		if virtualStages != 1 {
			return nil, argError("virtualStages", virtualStages, "must be 1 for the 1F1B schedule")
		}
		return NewTrainSchedule(microBatches, stages, stageID)
	case strings.EqualFold(scheduleType, ScheduleGPipe):
		if virtualStages != 1 {
			return nil, argError("virtualStages", virtualStages, "must be 1 for the GPipe schedule")
		}
		return NewGPipeSchedule(microBatches, stages, stageID)
	case strings.EqualFold(scheduleType, ScheduleInterleaved):
		if virtualStages < 2 {
			return nil, argError("virtualStages (pipeline_schedule.virtual_stages)", virtualStages, "must be at least 2 for the Interleaved schedule")
		}
		return NewInterleavedSchedule(virtualStages, microBatches, stages, stageID)
	}
	return nil, fmt.Errorf("%w: scheduleType %q is not one of %s, %s, %s", ErrInvalidArgument, scheduleType, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved)
}

func argError(name string, got int, want string) error {
	return fmt.Errorf("%w: %s %s, got %d", ErrInvalidArgument, name, want, got)
}

// checkShape validates the arguments every schedule constructor shares.
func checkShape(microBatches, stages, stageID int) error {
	switch {
	case microBatches < 1:
		return argError("microBatches", microBatches, "must be at least 1")
	case stages < 1:
		return argError("stages", stages, "must be at least 1")
	case stageID < 0 || stageID >= stages:
		return argError("stageID", stageID, fmt.Sprintf("must be in [0, %d)", stages))
	}
	return nil
}

// shape is what every schedule is built from.
type shape struct {
	microBatches, stages, stageID int
}

func (s shape) validMicroBatch(mb int) bool { return mb >= 0 && mb < s.microBatches }
func (s shape) isFirst() bool               { return s.stageID == 0 }
func (s shape) isLast() bool                { return s.stageID == s.stages-1 }

// buffered returns an instruction that names a buffer and a micro-batch.
func buffered(op Op, buffer, mb int) Instruction {
	return Instruction{Op: op, BufferID: buffer, MicroBatch: mb}
}

// stepEnd is the optimizer tail of the last training step.
func stepEnd() []Instruction {
	return []Instruction{
		{Op: ReduceTiedGrads, BufferID: -1, MicroBatch: -1},
		{Op: ReduceGrads, BufferID: -1, MicroBatch: -1},
		{Op: OptimizerStep, BufferID: -1, MicroBatch: -1},
	}
}
