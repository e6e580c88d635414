package nn

// Tensor and sequence parallelism on a device backend (the simulated
// device, CUDA). The per-row and per-block work of TP and Ulysses runs in
// the backend's kernels, on the activations where they live: TP's
// vocabulary-parallel cross-entropy and the masking of rows held
// elsewhere (backend.VocabParallel, tp_vocab.go), Ulysses's packing around
// its all-to-alls (TransposeBlocks, ulysses.go). Their arithmetic is that
// of the Go loops they replaced, so the CPU path kept its bits and a
// device computes the same ones; only the token ids (remapped on the host,
// where the batch is) go in, and the loss's per-row scalars come out.
// Megatron sequence parallelism's permutation is one TransposeBlocks of
// whole runs of rows. Collectives in the model move device memory, so its groups must
// be comms that can (a comm bound to the device, or one the engine wrapped
// for it: UseTensorParallelComm, UseSequenceParallelComm).

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

// freeAll frees and clears every non-nil tensor *ts[i] points to.
func freeAll(ts ...**tensor.Tensor) {
	for _, t := range ts {
		if *t != nil {
			(*t).Free()
			*t = nil
		}
	}
}
