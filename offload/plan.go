package offload

import "fmt"

// ActionKind is one thing the swapper does to a sub-group.
type ActionKind int

// Actions, in the order a sub-group meets them.
const (
	// IssueRead starts reading the group's state into Buffer.
	IssueRead ActionKind = iota
	// WaitRead waits for that read.
	WaitRead
	// IssueWrite starts writing the group's state from Buffer.
	IssueWrite
	// WaitWrite waits for that write; Buffer is free afterwards.
	WaitWrite
)

func (k ActionKind) String() string {
	switch k {
	case IssueRead:
		return "read"
	case WaitRead:
		return "wait-read"
	case IssueWrite:
		return "write"
	case WaitWrite:
		return "wait-write"
	}
	return fmt.Sprintf("ActionKind(%d)", int(k))
}

// Action is one step of a Plan.
type Action struct {
	Kind   ActionKind
	Group  int // index in the step order
	Buffer int // 0..buffer_count-1
}

func (a Action) String() string { return fmt.Sprintf("%s %d@%d", a.Kind, a.Group, a.Buffer) }

// PlanOptions are the offload_optimizer settings the plan depends on.
type PlanOptions struct {
	// Buffers is buffer_count: host buffers that hold one sub-group's state each.
	Buffers int
	// PipelineRead reads the next sub-group while the current one steps.
	PipelineRead bool
	// PipelineWrite lets a sub-group's write run on while later ones step;
	// it is waited for only when its buffer is needed, or at the step's end.
	PipelineWrite bool
}

// Plan is what the swapper does around each of the n sub-groups of one
// optimizer step: Before[i] runs before group i steps (its state is in
// Buffer of its WaitRead when Before[i] ends), After[i] after. Every write
// is waited for by the end of After[n-1], so between steps the files hold
// all the state and no buffer is in use.
type Plan struct {
	Before, After [][]Action
	// BufferOf is the buffer group i steps in.
	BufferOf []int
}

// NewPlan plans one step over n sub-groups stepping in index order.
func NewPlan(n int, o PlanOptions) (*Plan, error) {
	if n < 0 {
		return nil, fmt.Errorf("offload: plan of %d sub-groups: want >= 0", n)
	}
	if o.Buffers < 1 {
		return nil, fmt.Errorf("offload: buffer_count %d: want >= 1", o.Buffers)
	}
	p := &Plan{Before: make([][]Action, n), After: make([][]Action, n), BufferOf: make([]int, n)}
	free := make([]int, 0, o.Buffers)
	for b := o.Buffers - 1; b >= 0; b-- {
		free = append(free, b)
	}
	var writing []Action // issued writes not yet waited for, oldest first
	read := make([]bool, n)
	// take returns a free buffer, waiting for the oldest write when none is
	// free; ok is false when every buffer holds a group still needed.
	take := func(out *[]Action) (int, bool) {
		if len(free) == 0 && len(writing) > 0 {
			w := writing[0]
			writing = writing[1:]
			*out = append(*out, Action{WaitWrite, w.Group, w.Buffer})
			free = append(free, w.Buffer)
		}
		if len(free) == 0 {
			return 0, false
		}
		b := free[len(free)-1]
		free = free[:len(free)-1]
		return b, true
	}
	for i := range n {
		var before []Action
		if !read[i] {
			b, _ := take(&before) // always succeeds: group i-1's buffer was freed or is being written
			p.BufferOf[i], read[i] = b, true
			before = append(before, Action{IssueRead, i, b})
		}
		before = append(before, Action{WaitRead, i, p.BufferOf[i]})
		if o.PipelineRead && i+1 < n {
			if b, ok := take(&before); ok {
				p.BufferOf[i+1], read[i+1] = b, true
				before = append(before, Action{IssueRead, i + 1, b})
			}
		}
		after := []Action{{IssueWrite, i, p.BufferOf[i]}}
		writing = append(writing, after[0])
		if !o.PipelineWrite || i == n-1 {
			for _, w := range writing {
				after = append(after, Action{WaitWrite, w.Group, w.Buffer})
				free = append(free, w.Buffer)
			}
			writing = writing[:0]
		}
		p.Before[i], p.After[i] = before, after
	}
	return p, nil
}

// BuffersUsed is how many of the buffer_count buffers the plan ever
// fills: NVMeStore allocates a buffer at its first use, so this is the
// host memory in swap buffers (fewer than buffer_count when there are
// fewer sub-groups, or when nothing is pipelined and one buffer serves
// every sub-group in turn).
func (p *Plan) BuffersUsed() int {
	n := 0
	for _, b := range p.BufferOf {
		n = max(n, b+1)
	}
	return n
}
