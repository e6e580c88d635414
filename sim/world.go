package sim

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/deepgo-ml/deepgo/comm/local"
)

// World is n in-process ranks, each on its own simulated device (rank r on
// sim:r) and a comm/local world under it.
type World struct {
	w     *local.World
	bs    []*Backend
	comms []*Comm
}

// NewWorld makes n ranks. opts.Threads of 0 gives each device
// max(1, GOMAXPROCS/n) threads, so that the ranks together use the machine
// once. Close it once every operation has returned.
func NewWorld(n int, opts Options) (*World, error) {
	return NewWorldTimeout(n, opts, 0)
}

// NewWorldTimeout is NewWorld with the communicator's deadline for every
// operation (0: comm.DefaultTimeout()).
func NewWorldTimeout(n int, opts Options, timeout time.Duration) (*World, error) {
	if n < 1 {
		return nil, fmt.Errorf("sim.NewWorld: n = %d: must be >= 1", n)
	}
	if opts.Threads == 0 {
		opts.Threads = max(1, runtime.GOMAXPROCS(0)/n)
	}
	lw, err := local.NewWorld(n, local.Options{Timeout: timeout, Threads: 1})
	if err != nil {
		return nil, fmt.Errorf("sim.NewWorld: %w", err)
	}
	w := &World{w: lw}
	for r := range n {
		b, err := NewBackend(r, opts)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("sim.NewWorld: rank %d: %w", r, err)
		}
		w.bs = append(w.bs, b)
		w.comms = append(w.comms, NewComm(lw.Comm(r), b))
	}
	return w, nil
}

// Size is the number of ranks.
func (w *World) Size() int { return len(w.comms) }

// Comm is rank r's communicator over its device's tensors.
func (w *World) Comm(r int) *Comm { return w.comms[r] }

// Backend is rank r's device.
func (w *World) Backend(r int) *Backend { return w.bs[r] }

// Local is the host world under the ranks (Abort, fault tests).
func (w *World) Local() *local.World { return w.w }

// Close closes every rank's device and the host world. No operation may
// be in flight.
func (w *World) Close() error {
	var errs []error
	for _, b := range w.bs {
		errs = append(errs, b.Close())
	}
	errs = append(errs, w.w.Close())
	return errors.Join(errs...)
}
