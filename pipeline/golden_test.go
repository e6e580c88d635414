package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type goldenInstruction struct {
	Op       string `json:"op"`
	BufferID *int   `json:"buffer_id"`
}

type scheduleRecord struct {
	Schedule       string                `json:"schedule"`
	MicroBatches   int                   `json:"micro_batches"`
	Stages         int                   `json:"stages"`
	StageID        int                   `json:"stage_id"`
	NumPipeBuffers int                   `json:"num_pipe_buffers"`
	NumSteps       int                   `json:"num_steps"`
	Steps          [][]goldenInstruction `json:"steps"`
}

// reprSteps renders golden steps with DeepSpeed's repr, one line per step.
func (r scheduleRecord) reprSteps() []string {
	out := make([]string, len(r.Steps))
	for i, step := range r.Steps {
		s := make([]string, len(step))
		for j, in := range step {
			if in.BufferID != nil {
				s[j] = fmt.Sprintf("%s(buffer_id=%d)", in.Op, *in.BufferID)
			} else {
				s[j] = in.Op + "()"
			}
		}
		out[i] = "[" + strings.Join(s, ", ") + "]"
	}
	return out
}

func reprSteps(steps [][]Instruction) []string {
	out := make([]string, len(steps))
	for i, step := range steps {
		s := make([]string, len(step))
		for j, in := range step {
			s[j] = in.String()
		}
		out[i] = "[" + strings.Join(s, ", ") + "]"
	}
	return out
}

func TestGoldenPipeSchedules(t *testing.T) {
	recs := shareddata.ReadGolden[scheduleRecord](t, "pipe_schedules.jsonl")
	matched := map[string]int{}
	total := map[string]int{}
	for _, r := range recs {
		total[r.Schedule]++
		name := fmt.Sprintf("%s/mb=%d/stages=%d/stage=%d", r.Schedule, r.MicroBatches, r.Stages, r.StageID)
		var ctor func(int, int, int) (Schedule, error)
		switch r.Schedule {
		case "TrainSchedule":
			ctor = NewTrainSchedule
		case "InferenceSchedule":
			ctor = NewInferenceSchedule
		default:
			assert.Failf(t, "unknown schedule", "%s", name)
			continue
		}
		s, err := ctor(r.MicroBatches, r.Stages, r.StageID)
		if !assert.NoError(t, err, name) {
			continue
		}
		ok := assert.Equal(t, r.NumPipeBuffers, s.NumPipeBuffers(), "%s: NumPipeBuffers", name)
		got, want := reprSteps(s.Steps()), r.reprSteps()
		require.Len(t, want, r.NumSteps, "%s: golden record inconsistent", name)
		// slices.Equal, as before: an empty schedule equals a nil one.
		if !assert.True(t, slices.Equal(got, want), "%s: steps differ\n got: %s\nwant: %s", name, strings.Join(got, " "), strings.Join(want, " ")) {
			ok = false
		}
		if ok {
			matched[r.Schedule]++
		}
	}
	logSummary(t, "pipe_schedules.jsonl", []string{"TrainSchedule", "InferenceSchedule"}, matched, total)
	shareddata.Checked(t, "pipe_schedules.jsonl", len(recs), len(recs))
}

type goldenLayer struct {
	Kind            string `json:"kind"`
	Type            string `json:"type"`
	TrainableParams int64  `json:"trainable_params"`
	TotalParams     int64  `json:"total_params"`
}

type partitionRecord struct {
	Case        int           `json:"case"`
	Fn          string        `json:"fn"`
	NumItems    int           `json:"num_items"`
	NumParts    int           `json:"num_parts"`
	Weights     []float64     `json:"weights"`
	Parts       []int         `json:"parts"`
	Method      string        `json:"method"`
	NumStages   int           `json:"num_stages"`
	Layers      []goldenLayer `json:"layers"`
	StageBounds [][2]int      `json:"stage_bounds"`
	Error       *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// pythonErrorKind maps DeepSpeed's exception class to the sentinel error.
var pythonErrorKind = map[string]error{
	"NotImplementedError": ErrMethodNotImplemented,
	"RuntimeError":        ErrNoLayersMatched,
	"error":               ErrBadLayerRegex, // re.error
}

func goldenLayers(t *testing.T, in []goldenLayer) []Layer {
	out := make([]Layer, len(in))
	for i, l := range in {
		kind, ok := map[string]LayerKind{"LayerSpec": LayerSpec, "Module": LayerModule, "function": LayerFunction}[l.Kind]
		require.True(t, ok, "unknown layer kind %q", l.Kind)
		out[i] = Layer{Kind: kind, Type: l.Type, TrainableParams: l.TrainableParams}
	}
	return out
}

func TestGoldenPartitions(t *testing.T) {
	recs := shareddata.ReadGolden[partitionRecord](t, "partitions.jsonl")
	matched := map[string]int{}
	total := map[string]int{}
	for _, r := range recs {
		kind := r.Fn
		if r.Error != nil {
			kind += " (error)"
		}
		total[kind]++
		name := fmt.Sprintf("case %d (%s)", r.Case, r.Fn)
		var ok bool
		switch r.Fn {
		case "partition_uniform":
			got, err := PartitionUniform(r.NumItems, r.NumParts)
			ok = assert.True(t, err == nil && slices.Equal(got, r.Parts), "%s: PartitionUniform(%d, %d) = %v, %v; want %v", name, r.NumItems, r.NumParts, got, err, r.Parts)
		case "partition_balanced":
			got, err := PartitionBalanced(r.Weights, r.NumParts)
			ok = assert.True(t, err == nil && slices.Equal(got, r.Parts), "%s: PartitionBalanced(%v, %d) = %v, %v; want %v", name, r.Weights, r.NumParts, got, err, r.Parts)
		case "PipelineModule._partition_layers":
			ok = checkPartitionLayers(t, name, r)
		default:
			assert.Failf(t, "unknown fn", "%s", name)
		}
		if ok {
			matched[kind]++
		}
	}
	kinds := make([]string, 0, len(total))
	for k := range total {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	logSummary(t, "partitions.jsonl", kinds, matched, total)
	shareddata.Checked(t, "partitions.jsonl", len(recs), len(recs))
}

func checkPartitionLayers(t *testing.T, name string, r partitionRecord) bool {
	t.Helper()
	p, err := PartitionLayers(r.Method, goldenLayers(t, r.Layers), r.NumStages)
	if r.Error != nil {
		want, known := pythonErrorKind[r.Error.Type]
		// && stops at the first failed check, as the old switch did.
		var pe *PartitionError
		return assert.True(t, known, "%s: golden error type %q has no Go counterpart", name, r.Error.Type) &&
			assert.Error(t, err, "%s: PartitionLayers(%q) succeeded, want %s %q", name, r.Method, r.Error.Type, r.Error.Message) &&
			assert.ErrorIs(t, err, want, name) &&
			assert.ErrorAs(t, err, &pe, name) &&
			assert.Equal(t, r.Error.Message, pe.Msg, "%s: message", name)
	}
	if !assert.NoError(t, err, "%s: PartitionLayers(%q)", name, r.Method) {
		return false
	}
	// slices.Equal, as before: a nil slice equals an empty one.
	ok := assert.True(t, slices.Equal(p.Weights, r.Weights), "%s: weights %v, want %v", name, p.Weights, r.Weights)
	ok = assert.True(t, slices.Equal(p.Parts, r.Parts), "%s: parts %v, want %v", name, p.Parts, r.Parts) && ok
	ok = assert.Len(t, r.StageBounds, r.NumStages, "%s: golden stage bounds", name) && ok
	for s, b := range r.StageBounds {
		start, stop := p.StageBounds(s)
		ok = assert.Equal(t, b, [2]int{start, stop}, "%s: stage %d bounds", name, s) && ok
	}
	return ok
}
