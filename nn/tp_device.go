package nn

// Tensor and sequence parallelism on a device backend (the simulated
// device, CUDA). TP's vocabulary-parallel ends run on the device: the
// cross-entropy and the masking of rows held elsewhere are the backend's
// VocabParallel kernels (tp_vocab.go), whose arithmetic is that of the Go
// loops they replaced, so the CPU path kept its bits and a device computes
// the same ones; only the token ids (remapped on the host, where the batch
// is) go in, and the loss's per-row scalars come out. Megatron sequence
// parallelism's permutation is whole runs of rows moved by Copy. Ulysses's
// packing for its all-to-alls still runs as host loops on host copies of
// its device operands, staged in and out with the backend's Copy (stage):
// a host round trip of q, k, v per exchange, which device kernels for the
// packing would remove. Collectives in the model move device memory, so
// its groups must be comms that can (a comm bound to the device, or one
// the engine wrapped for it: UseTensorParallelComm,
// UseSequenceParallelComm).

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// UseTensorParallelComm makes the model's TP layers run their collectives
// on c, which must be the same group as GPTConfig.TP.Comm (deepgo's engine
// passes that group wrapped so that it moves its device's memory), and
// returns the comm used before, for the caller to put back. Without TP it
// does nothing and returns nil.
func (g *GPT) UseTensorParallelComm(c comm.Comm) comm.Comm {
	if g.tp == nil {
		return nil
	}
	prev := g.tp.c
	g.tp.c = c
	return prev
}

// UseSequenceParallelComm is UseTensorParallelComm for the Ulysses group
// (GPTConfig.SP).
func (g *GPT) UseSequenceParallelComm(c comm.Comm) comm.Comm {
	if g.sp == nil {
		return nil
	}
	prev := g.sp.c
	g.sp.c = c
	return prev
}

// onDevice reports whether be computes outside host memory.
func onDevice(be backend.Backend) bool { return be != nil && !be.Device().IsCPU() }

// checkGroupComm refuses a group whose comm moves host memory only while
// the model computes on a device: its collectives would be handed device
// tensors it cannot read.
func checkGroupComm(what string, c comm.Comm, be backend.Backend) error {
	dev := be.Device()
	if dev.IsCPU() {
		return nil
	}
	if bc, ok := c.(interface{ Backend() backend.Backend }); ok && bc.Backend() != nil && bc.Backend().Device() == dev {
		return nil
	}
	if dc, ok := c.(interface{ Device() tensor.Device }); ok && dc.Device() == dev {
		return nil
	}
	return fmt.Errorf("nn.GPT: %s on %v over a comm of host memory (%T): %w yet: build the group from comms bound to %v, or drive the model with deepgo.Initialize, which wraps it", what, dev, c, backend.ErrUnsupported, dev)
}

// scratchOn returns the buffer *p of at least n elements of dt on be's
// device (host memory for the CPU backend), reallocating it when it is
// smaller or elsewhere.
func scratchOn(be backend.Backend, p **tensor.Tensor, dt tensor.DType, n int) (*tensor.Tensor, error) {
	dev := tensor.CPU
	if be != nil {
		dev = be.Device()
	}
	if t := *p; t != nil && t.Numel() >= n && t.DType() == dt && t.Device() == dev {
		return t, nil
	}
	if *p != nil {
		(*p).Free()
		*p = nil
	}
	var t *tensor.Tensor
	var err error
	if dev.IsCPU() {
		t, err = tensor.Empty(dt, n)
	} else {
		t, err = be.Empty(dt, n)
	}
	if err != nil {
		return nil, err
	}
	*p = t
	return t, nil
}

// staged is a host view of the first n elements of a tensor: the tensor
// itself in host memory, else a host buffer the device's values were
// copied into (when load). store copies the host values back.
type staged struct {
	be   backend.Backend
	dev  *tensor.Tensor // the device tensor's first n elements; nil on the host
	host *tensor.Tensor
}

// stage views t[:n] on the host through the host buffer *buf.
func stage(be backend.Backend, buf **tensor.Tensor, t *tensor.Tensor, n int, load bool) (staged, error) {
	v, err := t.Slice(0, n)
	if err != nil {
		return staged{}, err
	}
	if v.Device().IsCPU() {
		return staged{host: v}, nil
	}
	h, err := scratchOn(nil, buf, t.DType(), n)
	if err != nil {
		return staged{}, err
	}
	if h, err = h.Slice(0, n); err != nil {
		return staged{}, err
	}
	if load {
		// a copy into host memory returns once the values are there
		// (backend.Backend.Copy), after the kernels that wrote them
		if err := be.Copy(h, v); err != nil {
			return staged{}, fmt.Errorf("nn: staging %v on the host: %w", t, err)
		}
	}
	return staged{be: be, dev: v, host: h}, nil
}

// store copies the host values back to the device (nothing on the host).
func (s staged) store() error {
	if s.dev == nil {
		return nil
	}
	if err := s.be.Copy(s.dev, s.host); err != nil {
		return fmt.Errorf("nn: copying staged values back to %v: %w", s.dev.Device(), err)
	}
	return nil
}

// freeAll frees and clears every non-nil tensor *ts[i] points to.
func freeAll(ts ...**tensor.Tensor) {
	for _, t := range ts {
		if *t != nil {
			(*t).Free()
			*t = nil
		}
	}
}
