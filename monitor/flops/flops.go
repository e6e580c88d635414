// Package flops is DeepSpeed's flops_profiler for deepgo models: per module
// parameters, MACs and flops (analytic, from the layers' shapes: nn.Cost)
// and measured forward latency at the profile step, printed in DeepSpeed's
// report layout (print_model_profile).
//
// The engine's modules are the measured level: a Recorder times each
// module's Forward (Wrap), or Profile runs and times one forward itself.
// Their sublayers' costs come from nn.Cost; their latencies are not
// measured and print as such.
package flops

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
)

// Coster is a module that knows its forward cost on a micro-batch; nn's
// GPT modules do.
type Coster interface {
	ForwardCost(mb model.MicroBatch) (nn.Cost, error)
}

// Node is one module or layer of the profile, its counts including its
// children's.
type Node struct {
	Name, Kind          string
	Params, MACs, FLOPs int64
	// Latency is the measured forward time; Measured is false where
	// nothing timed this node.
	Latency  time.Duration
	Measured bool
	Children []*Node
}

// Report is a model's profile at one step.
type Report struct {
	// Step is the step profiled, counted from 1 as the engines' step
	// lines count (global_steps once it is done): profile_step + 1, the
	// number DeepSpeed's report prints, since it profiles the step that
	// starts at global_steps == profile_step.
	Step int
	// Root is the model (depth 0); its children are the engine's modules.
	Root *Node
	// Notes list modules whose cost is unknown (not Costers).
	Notes []string

	// What the engine adds where it knows it (zero: not printed): the
	// world, data- and model-parallel sizes, the micro-batch size, its
	// forward, backward and step times (wall_clock_breakdown) and
	// flops_profiler.recompute_fwd_factor. Forward, when set, replaces
	// the sum of the modules' latencies, as DeepSpeed's engine timer does.
	World, DataParallel, ModelParallel, MicroBatch int
	Forward, Backward, StepTime                    time.Duration
	RecomputeFwdFactor                             float64
}

// Build assembles the report of mods on mb at step from the latencies of
// their forwards by module name (a Recorder's; missing ones are not
// measured). A module that is not a Coster counts its parameters, no
// flops, and is named in Notes.
func Build(step int, mods []model.Module, mb model.MicroBatch, lat map[string]time.Duration) (*Report, error) {
	r := &Report{Step: step, Root: &Node{Name: "model", Kind: "Model", Measured: true}}
	for _, m := range mods {
		var n *Node
		var err error
		if c, ok := m.(Coster); ok {
			var nc nn.Cost
			if nc, err = c.ForwardCost(mb); err == nil {
				n = node(nc)
			}
		}
		if err != nil && !errors.Is(err, errNoCost) {
			return nil, fmt.Errorf("flops.Build: module %s: %w", m.Name(), err)
		}
		if n == nil {
			inner := m
			if t, ok := m.(*timed); ok {
				inner = t.Module
			}
			n = &Node{Name: m.Name(), Kind: fmt.Sprintf("%T", inner)}
			for _, p := range m.Params() {
				k := int64(1)
				for _, d := range p.Shape {
					k *= int64(d)
				}
				n.Params += k
			}
			r.Notes = append(r.Notes, fmt.Sprintf("module %s (%s): FLOPs not known (not a flops.Coster), counted as 0", m.Name(), n.Kind))
		}
		n.Name = m.Name()
		n.Latency, n.Measured = lat[m.Name()]
		r.Root.Children = append(r.Root.Children, n)
		r.Root.Params += n.Params
		r.Root.MACs += n.MACs
		r.Root.FLOPs += n.FLOPs
		r.Root.Latency += n.Latency
		r.Root.Measured = r.Root.Measured && n.Measured
	}
	return r, nil
}

func node(c nn.Cost) *Node {
	n := &Node{Name: c.Name, Kind: c.Kind}
	n.Params, n.MACs, n.FLOPs = c.Total()
	for _, ch := range c.Children {
		n.Children = append(n.Children, node(ch))
	}
	return n
}

// Recorder collects the forward latency of modules by name. It is safe
// for concurrent use.
type Recorder struct {
	mu  sync.Mutex
	lat map[string]time.Duration
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{lat: map[string]time.Duration{}} }

// Add adds d to module name's forward time (an engine with its own timers
// may call it directly).
func (r *Recorder) Add(name string, d time.Duration) {
	r.mu.Lock()
	r.lat[name] += d
	r.mu.Unlock()
}

// Latencies returns a copy of the times recorded.
func (r *Recorder) Latencies() map[string]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]time.Duration, len(r.lat))
	for k, v := range r.lat {
		out[k] = v
	}
	return out
}

// Wrap returns m with its Forward timed into r. The wrapper keeps what an
// engine and Build ask of m: Resident and ForwardCost are m's.
func (r *Recorder) Wrap(m model.Module) model.Module { return &timed{Module: m, r: r} }

type timed struct {
	model.Module
	r *Recorder
}

// Forward is the module's, timed.
func (t *timed) Forward(ctx context.Context, in model.Activation) (model.Activation, error) {
	t0 := time.Now()
	out, err := t.Module.Forward(ctx, in)
	t.r.Add(t.Name(), time.Since(t0))
	return out, err
}

// Resident is the module's (false when it has none).
func (t *timed) Resident() bool {
	res, ok := t.Module.(model.Resident)
	return ok && res.Resident()
}

// ForwardCost is the module's; a module without one has no known cost.
func (t *timed) ForwardCost(mb model.MicroBatch) (nn.Cost, error) {
	c, ok := t.Module.(Coster)
	if !ok {
		return nn.Cost{}, fmt.Errorf("flops: module %s (%T): %w", t.Name(), t.Module, errNoCost)
	}
	return c.ForwardCost(mb)
}

var errNoCost = errors.New("not supported: FLOPs not known (not a flops.Coster)")

// Profile runs one forward of mods on mb, module after module in ctx (which
// must carry what the modules need: an engine's arena and backend, or a
// model's UseBackend), times each, and builds the report for step. The
// last module's output is dropped.
func Profile(ctx context.Context, mods []model.Module, mb model.MicroBatch, step int) (*Report, error) {
	rec := NewRecorder()
	var x model.Activation = mb.Input
	for _, m := range mods {
		var err error
		if x, err = rec.Wrap(m).Forward(ctx, x); err != nil {
			return nil, fmt.Errorf("flops.Profile: module %s: %w", m.Name(), err)
		}
	}
	return Build(step, mods, mb, rec.Latencies())
}
