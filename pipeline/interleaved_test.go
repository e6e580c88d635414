package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func interleavedPipeline(t *testing.T, virtual, microBatches, stages int) []Schedule {
	t.Helper()
	scheds := make([]Schedule, stages)
	for s := range stages {
		var err error
		scheds[s], err = NewInterleavedSchedule(virtual, microBatches, stages, s)
		require.NoError(t, err)
	}
	return scheds
}

// megatronOrder is the compute order Megatron's
// forward_backward_pipelining_with_interleaving runs on a stage, written
// out from its definition (get_model_chunk_id, microbatch groups of
// stages) independently of interleaved.go: "F mb.chunk" or "B mb.chunk".
func megatronOrder(virtual, microBatches, stages, stageID int) []string {
	total := microBatches * virtual
	warmup := min((stages-stageID-1)*2+(virtual-1)*stages, total)
	name := func(k int, forward bool) string {
		inGroup := k % (stages * virtual)
		chunk := inGroup / stages
		op := "F"
		if !forward {
			chunk, op = virtual-chunk-1, "B"
		}
		return fmt.Sprintf("%s %d.%d", op, k/(stages*virtual)*stages+inGroup%stages, chunk)
	}
	var out []string
	for k := range warmup {
		out = append(out, name(k, true))
	}
	for k := range total - warmup {
		out = append(out, name(k+warmup, true), name(k, false))
	}
	for k := total - warmup; k < total; k++ {
		out = append(out, name(k, false))
	}
	return out
}

// computeOrder lists a schedule's passes as megatronOrder spells them and
// fails if a step holds more than one.
func computeOrder(t *testing.T, sc Schedule) []string {
	t.Helper()
	var out []string
	for i, step := range sc.Steps() {
		n := 0
		for _, in := range step {
			switch in.Op {
			case ForwardPass:
				out = append(out, fmt.Sprintf("F %d.%d", in.MicroBatch, in.Chunk))
				n++
			case BackwardPass:
				out = append(out, fmt.Sprintf("B %d.%d", in.MicroBatch, in.Chunk))
				n++
			}
		}
		assert.LessOrEqual(t, n, 1, "step %d runs %d passes: %v", i, n, step)
	}
	return out
}

// TestInterleavedSimulate runs whole interleaved pipelines through the
// lockstep simulator with the ring between the last and the first stage:
// every transfer meets its partner (stage, chunk) in the same step without
// deadlock, each (micro-batch, chunk) is forwarded and backwarded exactly
// once per stage in dependency order, no buffer is overwritten while live,
// and the optimizer tail closes the last step. It also checks Megatron's
// compute order, that NumPipeBuffers is exactly the peak the simulator
// sees, and that the pipeline bubble is 2*(stages-1) steps.
func TestInterleavedSimulate(t *testing.T) {
	for stages := 1; stages <= 4; stages++ {
		for virtual := 2; virtual <= 3; virtual++ {
			for mb := stages; mb <= 8; mb += stages {
				checkInterleaved(t, virtual, mb, stages)
			}
		}
	}
}

// TestInterleavedSimulateWide is the same check over deeper pipelines, more
// chunks and more micro-batch groups.
func TestInterleavedSimulateWide(t *testing.T) {
	for stages := 5; stages <= 8; stages++ {
		for virtual := 2; virtual <= 4; virtual++ {
			for mb := stages; mb <= 3*stages; mb += stages {
				checkInterleaved(t, virtual, mb, stages)
			}
		}
	}
	for _, v := range []int{4, 6} {
		checkInterleaved(t, v, 16, 4)
	}
}

func checkInterleaved(t *testing.T, virtual, mb, stages int) {
	t.Helper()
	name := fmt.Sprintf("stages=%d virtual=%d micro_batches=%d", stages, virtual, mb)
	scheds := interleavedPipeline(t, virtual, mb, stages)
	peaks, err := simulateChunks(scheds, mb, virtual, true)
	if !assert.NoError(t, err, name) {
		return
	}
	for s, sc := range scheds {
		assert.Equal(t, peaks[s], sc.NumPipeBuffers(), "%s stage %d: NumPipeBuffers against the simulator peak", name, s)
		got, want := computeOrder(t, sc), megatronOrder(virtual, mb, stages, s)
		assert.True(t, slices.Equal(got, want), "%s stage %d: compute order\n got %v\nwant %v", name, s, got, want)
		assert.Len(t, sc.Steps(), 2*mb*virtual+2*(stages-1), "%s stage %d: steps, want 2*micro_batches*virtual + a bubble of 2*(stages-1)", name, s)
	}
}

// TestInterleavedWarmup pins the forwards each stage runs before its first
// backward against Megatron's (stages-stageID-1)*2 + (virtual-1)*stages,
// capped at micro_batches*virtual, and the buffer count that follows.
func TestInterleavedWarmup(t *testing.T) {
	tests := []struct {
		virtual, microBatches, stages int
		warmup                        []int // per stage
	}{
		{2, 8, 4, []int{10, 8, 6, 4}},
		{2, 4, 4, []int{8, 8, 6, 4}},    // stage 0 capped at 4*2
		{3, 4, 4, []int{12, 12, 10, 8}}, // stages 0 and 1 capped at 12
		{3, 8, 4, []int{14, 12, 10, 8}},
		{2, 2, 2, []int{4, 2}},
		{2, 6, 2, []int{4, 2}},
		{3, 6, 3, []int{10, 8, 6}},
		{2, 8, 1, []int{1}},
		{3, 3, 1, []int{2}},
		{4, 16, 8, []int{38, 36, 34, 32, 30, 28, 26, 24}},
	}
	for _, tt := range tests {
		for s, want := range tt.warmup {
			assert.Equal(t, want, interleavedWarmup(tt.virtual, tt.microBatches, tt.stages, s), "virtual=%d mb=%d stages=%d stage %d: warmup", tt.virtual, tt.microBatches, tt.stages, s)
			sc, err := NewInterleavedSchedule(tt.virtual, tt.microBatches, tt.stages, s)
			require.NoError(t, err)
			order := computeOrder(t, sc)
			firstB := slices.IndexFunc(order, func(p string) bool { return p[0] == 'B' })
			// The steady state opens with a forward, so warmup+1 forwards
			// precede the first backward unless the warmup is everything.
			assert.Equal(t, min(want+1, tt.microBatches*tt.virtual), firstB, "virtual=%d mb=%d stages=%d stage %d: forwards before the first backward", tt.virtual, tt.microBatches, tt.stages, s)
			assert.Equal(t, min(want+1, tt.microBatches*tt.virtual), sc.NumPipeBuffers(), "virtual=%d mb=%d stages=%d stage %d: NumPipeBuffers", tt.virtual, tt.microBatches, tt.stages, s)
		}
	}
}

// TestInterleavedOneChunk: with one chunk per stage the schedule is a valid
// 1F1B order: every micro-batch forwarded and backwarded once, in ascending
// order, warmup forwards then alternating then the remaining backwards,
// with no chunk annotations.
func TestInterleavedOneChunk(t *testing.T) {
	for stages := 1; stages <= 4; stages++ {
		for mb := stages; mb <= 8; mb += stages {
			scheds := interleavedPipeline(t, 1, mb, stages)
			if _, err := simulateChunks(scheds, mb, 1, true); !assert.NoError(t, err, "stages=%d mb=%d", stages, mb) {
				continue
			}
			for s, sc := range scheds {
				warmup := min(2*(stages-s-1), mb)
				var want []string
				for i := range warmup {
					want = append(want, fmt.Sprintf("F %d.0", i))
				}
				for i := range mb - warmup {
					want = append(want, fmt.Sprintf("F %d.0", i+warmup), fmt.Sprintf("B %d.0", i))
				}
				for i := mb - warmup; i < mb; i++ {
					want = append(want, fmt.Sprintf("B %d.0", i))
				}
				got := computeOrder(t, sc)
				assert.True(t, slices.Equal(got, want), "stages=%d mb=%d stage %d: order %v, want %v", stages, mb, s, got, want)
				for _, line := range reprSteps(sc.Steps()) {
					assert.NotContains(t, line, "chunk", "stages=%d mb=%d stage %d: chunk annotation", stages, mb, s)
				}
			}
		}
	}
}

func TestInterleavedArgumentErrors(t *testing.T) {
	tests := []struct {
		virtual, microBatches, stages, stageID int
		wantArgs                               []string
	}{
		{0, 4, 2, 0, []string{"virtual_stages"}},
		{2, 0, 2, 0, []string{"microBatches"}},
		{2, 6, 4, 0, []string{"microBatches", "stages"}},
		{2, 3, 2, 1, []string{"microBatches", "stages"}},
		{2, 4, 2, 2, []string{"stageID"}},
		{2, 4, 0, 0, []string{"stages"}},
	}
	for _, tt := range tests {
		_, err := NewInterleavedSchedule(tt.virtual, tt.microBatches, tt.stages, tt.stageID)
		if !assert.ErrorIs(t, err, ErrInvalidArgument, "NewInterleavedSchedule(%d, %d, %d, %d)", tt.virtual, tt.microBatches, tt.stages, tt.stageID) {
			continue
		}
		for _, a := range tt.wantArgs {
			assert.ErrorContains(t, err, a, "NewInterleavedSchedule(%d, %d, %d, %d)", tt.virtual, tt.microBatches, tt.stages, tt.stageID)
		}
	}
	// Through NewTraining, as the config reaches it.
	_, err := NewTraining("Interleaved", 2, 6, 4, 0)
	if assert.ErrorIs(t, err, ErrInvalidArgument, "NewTraining(Interleaved, 2, 6, 4, 0)") {
		assert.ErrorContains(t, err, "microBatches", "NewTraining(Interleaved, 2, 6, 4, 0)")
		assert.ErrorContains(t, err, "stages", "NewTraining(Interleaved, 2, 6, 4, 0)")
	}
	for _, v := range []int{0, 1} {
		_, err := NewTraining("Interleaved", v, 4, 2, 0)
		if assert.ErrorIs(t, err, ErrInvalidArgument, "NewTraining(Interleaved, %d)", v) {
			assert.ErrorContains(t, err, "virtual_stages", "NewTraining(Interleaved, %d)", v)
		}
	}
}

func TestInstructionStringChunk(t *testing.T) {
	tests := []struct {
		in   Instruction
		want string
	}{
		{Instruction{Op: ForwardPass, BufferID: 2, MicroBatch: 1, Chunk: 1}, "ForwardPass(buffer_id=2, chunk=1)"},
		{Instruction{Op: SendGrad, BufferID: 0, MicroBatch: 0, Chunk: 0}, "SendGrad(buffer_id=0)"},
		{Instruction{Op: OptimizerStep, BufferID: -1, MicroBatch: -1}, "OptimizerStep()"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.in.String(), "%#v.String()", tt.in)
	}
}

func TestInterleavedStepsFreshAndNonNil(t *testing.T) {
	s, err := NewInterleavedSchedule(2, 4, 4, 3)
	require.NoError(t, err)
	a := s.Steps()
	before := strings.Join(reprSteps(a), "")
	for i, step := range a {
		assert.NotNil(t, step, "step %d is nil", i)
		for j := range step {
			step[j].Op = OptimizerStep
		}
	}
	assert.Equal(t, before, strings.Join(reprSteps(s.Steps()), ""), "mutating Steps() changed the schedule")
}

// TestInterleavedSteps pins a small pipeline's whole instruction stream:
// two stages, two chunks each, two micro-batches.
func TestInterleavedSteps(t *testing.T) {
	want := [][]string{
		{
			"[LoadMicroBatch(buffer_id=0), ForwardPass(buffer_id=0)]",
			"[SendActivation(buffer_id=0), LoadMicroBatch(buffer_id=1), ForwardPass(buffer_id=1)]",
			"[SendActivation(buffer_id=1), RecvActivation(buffer_id=2, chunk=1), ForwardPass(buffer_id=2, chunk=1)]",
			"[SendActivation(buffer_id=2, chunk=1), RecvActivation(buffer_id=3, chunk=1), ForwardPass(buffer_id=3, chunk=1)]",
			"[]",
			"[RecvGrad(buffer_id=2, chunk=1), SendActivation(buffer_id=3, chunk=1), BackwardPass(buffer_id=2, chunk=1)]",
			"[SendGrad(buffer_id=2, chunk=1)]",
			"[RecvGrad(buffer_id=3, chunk=1), BackwardPass(buffer_id=3, chunk=1)]",
			"[SendGrad(buffer_id=3, chunk=1), RecvGrad(buffer_id=0), BackwardPass(buffer_id=0)]",
			"[RecvGrad(buffer_id=1), BackwardPass(buffer_id=1), ReduceTiedGrads(), ReduceGrads(), OptimizerStep()]",
		},
		{
			"[]",
			"[RecvActivation(buffer_id=0), ForwardPass(buffer_id=0)]",
			"[RecvActivation(buffer_id=1), SendActivation(buffer_id=0), ForwardPass(buffer_id=1)]",
			"[RecvActivation(buffer_id=2, chunk=1), SendActivation(buffer_id=1), LoadMicroBatch(buffer_id=2, chunk=1), ForwardPass(buffer_id=2, chunk=1)]",
			"[BackwardPass(buffer_id=2, chunk=1)]",
			"[SendGrad(buffer_id=2, chunk=1), RecvActivation(buffer_id=2, chunk=1), LoadMicroBatch(buffer_id=2, chunk=1), ForwardPass(buffer_id=2, chunk=1)]",
			"[RecvGrad(buffer_id=0), BackwardPass(buffer_id=2, chunk=1)]",
			"[SendGrad(buffer_id=2, chunk=1), BackwardPass(buffer_id=0)]",
			"[RecvGrad(buffer_id=1), SendGrad(buffer_id=0), BackwardPass(buffer_id=1)]",
			"[SendGrad(buffer_id=1), ReduceTiedGrads(), ReduceGrads(), OptimizerStep()]",
		},
	}
	for stage, w := range want {
		s, err := NewInterleavedSchedule(2, 2, 2, stage)
		require.NoError(t, err)
		got := reprSteps(s.Steps())
		assert.True(t, slices.Equal(got, w), "stage %d:\n got %s\nwant %s", stage, strings.Join(got, "\n     "), strings.Join(w, "\n     "))
	}
}

// TestSimulatorCatchesBrokenInterleaved makes sure the ring-aware checks
// are not vacuous.
func TestSimulatorCatchesBrokenInterleaved(t *testing.T) {
	find := func(st [][]Instruction, ok func(Instruction) bool) (int, int) {
		for i, step := range st {
			for j, in := range step {
				if ok(in) {
					return i, j
				}
			}
		}
		panic("no such instruction")
	}
	corruptions := []struct {
		name          string
		stages        int
		edit          func(st [][][]Instruction, nbuf []int)
		wantInMessage string
	}{
		{"wrap-around recv dropped", 2, func(st [][][]Instruction, _ []int) {
			i, j := find(st[0], func(in Instruction) bool { return in.Op == RecvActivation && in.Chunk == 1 })
			st[0][i] = slices.Delete(st[0][i], j, j+1)
		}, ""},
		{"wrap-around send names the wrong chunk", 2, func(st [][][]Instruction, _ []int) {
			i, j := find(st[1], func(in Instruction) bool { return in.Op == SendActivation && in.Chunk == 0 })
			st[1][i][j].Chunk = 1
		}, ""},
		{"gradient sent to the wrong chunk", 3, func(st [][][]Instruction, _ []int) {
			i, j := find(st[0], func(in Instruction) bool { return in.Op == RecvGrad && in.Chunk == 0 })
			st[0][i][j].Chunk = 1
		}, ""},
		{"self transfer split", 1, func(st [][][]Instruction, _ []int) {
			i, j := find(st[0], func(in Instruction) bool { return in.Op == SendActivation })
			st[0][i][j], st[0][i][j+1] = st[0][i][j+1], st[0][i][j]
		}, ""},
		{"one buffer too few", 2, func(st [][][]Instruction, nbuf []int) { nbuf[0]-- }, "buffer"},
		{"tail early", 2, func(st [][][]Instruction, _ []int) {
			last := len(st[1]) - 1
			st[1][last-1] = append(st[1][last-1], st[1][last][len(st[1][last])-3:]...)
			st[1][last] = st[1][last][:len(st[1][last])-3]
		}, "end-of-batch"},
	}
	for _, c := range corruptions {
		const virtual = 2
		mb := 2 * c.stages
		steps := make([][][]Instruction, c.stages)
		nbuf := make([]int, c.stages)
		for s, sc := range interleavedPipeline(t, virtual, mb, c.stages) {
			steps[s], nbuf[s] = sc.Steps(), sc.NumPipeBuffers()
		}
		c.edit(steps, nbuf)
		scheds := make([]Schedule, c.stages)
		for s := range c.stages {
			scheds[s] = fixedSchedule{steps[s], nbuf[s]}
		}
		_, err := simulateChunks(scheds, mb, virtual, true)
		if assert.Error(t, err, "%s: simulator accepted a broken schedule", c.name) &&
			assert.ErrorContains(t, err, c.wantInMessage, c.name) {
			t.Logf("%s: %v", c.name, err)
		}
	}
}
