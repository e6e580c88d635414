package pipeline

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestScheduleArgumentErrors(t *testing.T) {
	ctors := map[string]func(int, int, int) (Schedule, error){
		"Train": NewTrainSchedule, "Inference": NewInferenceSchedule, "GPipe": NewGPipeSchedule,
	}
	tests := []struct {
		microBatches, stages, stageID int
		wantArg                       string
	}{
		{0, 1, 0, "microBatches"},
		{-3, 2, 0, "microBatches"},
		{1, 0, 0, "stages"},
		{1, 2, 2, "stageID"},
		{1, 2, -1, "stageID"},
	}
	for name, ctor := range ctors {
		for _, tt := range tests {
			_, err := ctor(tt.microBatches, tt.stages, tt.stageID)
			if assert.ErrorIs(t, err, ErrInvalidArgument, "%s(%d, %d, %d)", name, tt.microBatches, tt.stages, tt.stageID) {
				assert.ErrorContains(t, err, tt.wantArg, "%s(%d, %d, %d)", name, tt.microBatches, tt.stages, tt.stageID)
			}
		}
	}
}

func TestNewTraining(t *testing.T) {
	tests := []struct {
		kind    string
		virtual int
		wantErr error
		wantArg string
		same    func(int, int, int) (Schedule, error)
	}{
		{kind: "", virtual: 1, same: NewTrainSchedule},
		{kind: "1F1B", virtual: 1, same: NewTrainSchedule},
		{kind: "1f1b", virtual: 1, same: NewTrainSchedule},
		{kind: "GPipe", virtual: 1, same: NewGPipeSchedule},
		{kind: "gpipe", virtual: 1, same: NewGPipeSchedule},
		{kind: "Interleaved", virtual: 2, same: func(mb, stages, id int) (Schedule, error) { return NewInterleavedSchedule(2, mb, stages, id) }},
		{kind: "interleaved", virtual: 3, same: func(mb, stages, id int) (Schedule, error) { return NewInterleavedSchedule(3, mb, stages, id) }},
		{kind: "interleaved", virtual: 1, wantErr: ErrInvalidArgument, wantArg: "virtual_stages"},
		{kind: "GPipe", virtual: 2, wantErr: ErrInvalidArgument, wantArg: "virtualStages"},
		{kind: "1F1B", virtual: 0, wantErr: ErrInvalidArgument, wantArg: "virtualStages"},
		{kind: "ZB-H1", virtual: 1, wantErr: ErrInvalidArgument, wantArg: "scheduleType"},
	}
	for _, tt := range tests {
		s, err := NewTraining(tt.kind, tt.virtual, 4, 2, 1)
		if tt.wantErr != nil {
			if assert.ErrorIs(t, err, tt.wantErr, "NewTraining(%q, %d)", tt.kind, tt.virtual) {
				assert.ErrorContains(t, err, tt.wantArg, "NewTraining(%q, %d)", tt.kind, tt.virtual)
			}
			continue
		}
		if !assert.NoError(t, err, "NewTraining(%q, %d)", tt.kind, tt.virtual) {
			continue
		}
		want, _ := tt.same(4, 2, 1)
		assert.Equal(t, strings.Join(reprSteps(want.Steps()), ""), strings.Join(reprSteps(s.Steps()), ""), "NewTraining(%q) is not the expected schedule", tt.kind)
	}
}

func TestInstructionString(t *testing.T) {
	tests := []struct {
		in   Instruction
		want string
	}{
		{buffered(LoadMicroBatch, 1, 3), "LoadMicroBatch(buffer_id=1)"},
		{buffered(RecvGrad, 0, 0), "RecvGrad(buffer_id=0)"},
		{Instruction{Op: ReduceTiedGrads}, "ReduceTiedGrads()"},
		{Instruction{Op: OptimizerStep, BufferID: -1, MicroBatch: -1}, "OptimizerStep()"},
		{Instruction{}, "Op(0)()"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.in.String(), "%#v.String()", tt.in)
	}
	for o := LoadMicroBatch; o <= OptimizerStep; o++ {
		back, err := ParseOp(o.String())
		if assert.NoError(t, err, "ParseOp(%q)", o.String()) {
			assert.Equal(t, o, back, "ParseOp(%q)", o.String())
		}
	}
	_, err := ParseOp("Barrier")
	assert.Error(t, err, "ParseOp(Barrier) succeeded")
}

// TestStepsAreFresh: callers may mutate what Steps returns.
func TestStepsAreFresh(t *testing.T) {
	for _, ctor := range []func(int, int, int) (Schedule, error){NewTrainSchedule, NewInferenceSchedule, NewGPipeSchedule} {
		s, _ := ctor(4, 2, 0)
		a := s.Steps()
		before := strings.Join(reprSteps(a), "")
		for _, step := range a {
			for i := range step {
				step[i].Op = OptimizerStep
			}
		}
		assert.Equal(t, before, strings.Join(reprSteps(s.Steps()), ""), "%T: mutating Steps() changed the schedule", s)
	}
}

// TestStepsNeverNil: idle steps are empty, non-nil lists, as DeepSpeed
// yields [] (so they encode as [] rather than null).
func TestStepsNeverNil(t *testing.T) {
	for _, ctor := range []func(int, int, int) (Schedule, error){NewTrainSchedule, NewInferenceSchedule, NewGPipeSchedule} {
		s, _ := ctor(1, 4, 2)
		for i, step := range s.Steps() {
			assert.NotNil(t, step, "%T: step %d is nil", s, i)
		}
	}
}
