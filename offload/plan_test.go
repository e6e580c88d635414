package offload

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func render(p *Plan) string {
	var b strings.Builder
	for i := range p.Before {
		fmt.Fprintf(&b, "%v | step %d | %v\n", p.Before[i], i, p.After[i])
	}
	return b.String()
}

func TestPlanTable(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
		o    PlanOptions
		want string
	}{
		{"serial", 3, PlanOptions{Buffers: 1}, `
[read 0@0 wait-read 0@0] | step 0 | [write 0@0 wait-write 0@0]
[read 1@0 wait-read 1@0] | step 1 | [write 1@0 wait-write 1@0]
[read 2@0 wait-read 2@0] | step 2 | [write 2@0 wait-write 2@0]
`},
		{"one buffer cannot prefetch", 2, PlanOptions{Buffers: 1, PipelineRead: true, PipelineWrite: true}, `
[read 0@0 wait-read 0@0] | step 0 | [write 0@0]
[wait-write 0@0 read 1@0 wait-read 1@0] | step 1 | [write 1@0 wait-write 1@0]
`},
		{"pipelined read", 3, PlanOptions{Buffers: 2, PipelineRead: true}, `
[read 0@0 wait-read 0@0 read 1@1] | step 0 | [write 0@0 wait-write 0@0]
[wait-read 1@1 read 2@0] | step 1 | [write 1@1 wait-write 1@1]
[wait-read 2@0] | step 2 | [write 2@0 wait-write 2@0]
`},
		{"pipelined read and write", 4, PlanOptions{Buffers: 2, PipelineRead: true, PipelineWrite: true}, `
[read 0@0 wait-read 0@0 read 1@1] | step 0 | [write 0@0]
[wait-read 1@1 wait-write 0@0 read 2@0] | step 1 | [write 1@1]
[wait-read 2@0 wait-write 1@1 read 3@1] | step 2 | [write 2@0]
[wait-read 3@1] | step 3 | [write 3@1 wait-write 2@0 wait-write 3@1]
`},
		{"pipelined write, spare buffers", 3, PlanOptions{Buffers: 4, PipelineWrite: true}, `
[read 0@0 wait-read 0@0] | step 0 | [write 0@0]
[read 1@1 wait-read 1@1] | step 1 | [write 1@1]
[read 2@2 wait-read 2@2] | step 2 | [write 2@2 wait-write 0@0 wait-write 1@1 wait-write 2@2]
`},
		{"empty", 0, PlanOptions{Buffers: 2}, "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := NewPlan(c.n, c.o)
			require.NoError(t, err)
			assert.Equal(t, strings.TrimPrefix(c.want, "\n"), render(p))
		})
	}
}

// TestPlanInvariants replays plans of every shape: each group is read into
// a buffer no other group holds, waited for before it steps, written after,
// every write is waited for by the end, and with pipeline_read and two
// buffers every group but the first is read before the previous one steps.
func TestPlanInvariants(t *testing.T) {
	for n := 0; n <= 7; n++ {
		for buffers := 1; buffers <= 5; buffers++ {
			for flags := range 4 {
				o := PlanOptions{Buffers: buffers, PipelineRead: flags&1 != 0, PipelineWrite: flags&2 != 0}
				t.Run(fmt.Sprintf("n%d/%+v", n, o), func(t *testing.T) {
					p, err := NewPlan(n, o)
					require.NoError(t, err)
					checkPlan(t, p, n, o)
				})
			}
		}
	}
}

func checkPlan(t *testing.T, p *Plan, n int, o PlanOptions) {
	holder := make([]int, o.Buffers) // group+1 using each buffer, 0 when free
	state := make([]string, n)
	prefetched := make([]bool, n)
	apply := func(a Action, stepping int) {
		require.Less(t, a.Buffer, o.Buffers, "%v", a)
		switch a.Kind {
		case IssueRead:
			require.Zero(t, holder[a.Buffer], "%v: buffer held by group %d", a, holder[a.Buffer]-1)
			require.Equal(t, "", state[a.Group], "%v", a)
			holder[a.Buffer], state[a.Group] = a.Group+1, "reading"
			prefetched[a.Group] = a.Group > stepping
		case WaitRead:
			require.Equal(t, "reading", state[a.Group], "%v", a)
			state[a.Group] = "read"
		case IssueWrite:
			require.Equal(t, "stepped", state[a.Group], "%v", a)
			state[a.Group] = "writing"
		case WaitWrite:
			require.Equal(t, "writing", state[a.Group], "%v", a)
			require.Equal(t, a.Group+1, holder[a.Buffer], "%v", a)
			holder[a.Buffer], state[a.Group] = 0, "done"
		}
	}
	for i := range n {
		for _, a := range p.Before[i] {
			apply(a, i)
		}
		require.Equal(t, "read", state[i], "group %d steps", i)
		require.Equal(t, i+1, holder[p.BufferOf[i]], "group %d's buffer", i)
		state[i] = "stepped"
		for _, a := range p.After[i] {
			apply(a, i)
		}
	}
	for g, s := range state {
		assert.Equal(t, "done", s, "group %d at the end", g)
	}
	assert.Equal(t, make([]int, o.Buffers), holder, "buffers free at the end")
	for g := 1; g < n; g++ {
		assert.Equal(t, o.PipelineRead && o.Buffers >= 2, prefetched[g], "group %d read while %d stepped", g, g-1)
	}
}

func TestPlanBadOptions(t *testing.T) {
	_, err := NewPlan(3, PlanOptions{Buffers: 0})
	assert.ErrorContains(t, err, "buffer_count 0")
	_, err = NewPlan(-1, PlanOptions{Buffers: 2})
	assert.ErrorContains(t, err, "-1 sub-groups")
}

// BuffersUsed is the host memory of swap buffers the store allocates:
// without pipelining one buffer serves every sub-group in turn; never more
// than buffer_count, nor than the sub-groups.
func TestPlanBuffersUsed(t *testing.T) {
	for _, c := range []struct {
		n    int
		o    PlanOptions
		want int
	}{
		{1, PlanOptions{Buffers: 4}, 1},
		{1, PlanOptions{Buffers: 4, PipelineRead: true, PipelineWrite: true}, 1},
		{9, PlanOptions{Buffers: 4}, 1},
		{9, PlanOptions{Buffers: 4, PipelineRead: true}, 2},
		{9, PlanOptions{Buffers: 4, PipelineWrite: true}, 4},
		{9, PlanOptions{Buffers: 4, PipelineRead: true, PipelineWrite: true}, 4},
		{3, PlanOptions{Buffers: 8, PipelineRead: true, PipelineWrite: true}, 3},
		{0, PlanOptions{Buffers: 4}, 0},
	} {
		p, err := NewPlan(c.n, c.o)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.BuffersUsed(); got != c.want {
			t.Errorf("%d sub-groups, %+v: BuffersUsed %d, want %d", c.n, c.o, got, c.want)
		}
	}
}
