// Package benchdev opens the device a benchmark binary runs on (-device
// sim or cuda), for the examples that time work on a device backend.
package benchdev

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/cuda"
	"github.com/deepgo-ml/deepgo/sim"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Open makes the backend of dev: the simulated device on threads C
// threads, without its random kernel delays (which would time sleeps), or
// a GPU (an error wrapping cuda.ErrNoCUDA in a build without the cuda tag).
// The CPU is not a device here: its benchmarks make backend.NewCPU pools.
func Open(dev tensor.Device, threads int) (backend.Backend, error) {
	switch dev.Kind {
	case tensor.KindSim:
		b, err := sim.NewBackend(dev.Index, sim.Options{Threads: threads, MaxDelay: -1})
		if err != nil {
			return nil, fmt.Errorf("-device %v: %w", dev, err)
		}
		return b, nil
	case tensor.KindCUDA:
		b, err := cuda.NewBackend(dev.Index)
		if err != nil {
			return nil, fmt.Errorf("-device %v: %w", dev, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("-device %v: not a device benchmarks open (allowed: sim, cuda)", dev)
}
