package deepgo

// The model's own groups on a device: a TP or Ulysses SP model runs
// collectives inside its layers on the group it was built with, which on
// a device must move device memory, as the engine's own comm must. Both
// engines give the model's groups deviceCommFor's treatment: a group
// already bound to the device stays; otherwise the backend wraps it (the
// simulated device orders it after the rank's stream, CUDA stages through
// host buffers) and the model is handed the wrapper for the engine's
// lifetime. Close gives the model its group back and releases the
// wrapper, which, like the engine's comm wrapper, is the engine's.

import (
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
)

// modelGroups are the model's groups an engine replaced with device
// wrappers: what to put back and what to release at Close.
type modelGroups struct {
	restore []func()
	wrapped []comm.Comm
}

// tpCommUser is a model whose TP layers can take their group's comm
// (nn.GPT): the engine hands it the device wrapper.
type tpCommUser interface {
	UseTensorParallelComm(c comm.Comm) comm.Comm
}

// spCommUser is tpCommUser for a Ulysses model's SP group.
type spCommUser interface {
	UseSequenceParallelComm(c comm.Comm) comm.Comm
}

// useOnDevice returns c as a comm that moves be's memory (c itself on
// the CPU or when bound to the device) and, when that is a wrapper,
// records it for release and hands it to the model through use (nil for
// a model that takes no comm: the engine's own calls still use the
// wrapper, and a model computing collectives on the host comm fails in
// its own layers). what names the group for errors.
func (g *modelGroups) useOnDevice(be backend.Backend, c comm.Comm, use func(comm.Comm) comm.Comm, what string) (comm.Comm, error) {
	if c == nil || be.Device().IsCPU() {
		return c, nil
	}
	w, err := deviceCommFor(be, c)
	if err != nil {
		return nil, fmt.Errorf("%w (the model's %s group)", err, what)
	}
	if w == c {
		return c, nil
	}
	g.wrapped = append(g.wrapped, w)
	if use != nil {
		prev := use(w)
		g.restore = append(g.restore, func() { use(prev) })
	}
	return w, nil
}

// tensorParallel wraps the TP group tp for be and hands it to net.
func (g *modelGroups) tensorParallel(be backend.Backend, net any, tp comm.Comm) (comm.Comm, error) {
	var use func(comm.Comm) comm.Comm
	if u, ok := net.(tpCommUser); ok {
		use = u.UseTensorParallelComm
	}
	return g.useOnDevice(be, tp, use, fmt.Sprintf("tensor_model_parallel_size %d", sizeOf(tp)))
}

// sequenceParallel wraps the Ulysses group sp for be and hands it to net.
func (g *modelGroups) sequenceParallel(be backend.Backend, net any, sp comm.Comm) (comm.Comm, error) {
	var use func(comm.Comm) comm.Comm
	if u, ok := net.(spCommUser); ok {
		use = u.UseSequenceParallelComm
	}
	return g.useOnDevice(be, sp, use, fmt.Sprintf("sequence_parallel_size %d", sizeOf(sp)))
}

// release gives the model its groups back, then releases the wrappers.
func (g *modelGroups) release() error {
	for i := len(g.restore) - 1; i >= 0; i-- {
		g.restore[i]()
	}
	var errs []error
	for _, w := range g.wrapped {
		errs = append(errs, releaseWrapper(w))
	}
	g.restore, g.wrapped = nil, nil
	return errors.Join(errs...)
}

func sizeOf(c comm.Comm) int {
	if c == nil {
		return 1
	}
	return c.Size()
}
