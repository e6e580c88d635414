package comm

import (
	"fmt"
	"unsafe"

	"github.com/deepgo-ml/deepgo/tensor"
)

// OpKind names a Comm operation.
type OpKind uint8

// Operations, as posted in a Call.
const (
	OpAllReduce OpKind = iota + 1
	OpReduceScatter
	OpAllGather
	OpBroadcast
	OpReduce
	OpSend
	OpRecv
	OpAllToAll
	OpBarrier
	OpSplit
)

var opNames = [...]string{
	OpAllReduce: "AllReduce", OpReduceScatter: "ReduceScatter", OpAllGather: "AllGather",
	OpBroadcast: "Broadcast", OpReduce: "Reduce", OpSend: "Send", OpRecv: "Recv",
	OpAllToAll: "AllToAll", OpBarrier: "Barrier", OpSplit: "Split",
}

// String is the method name, e.g. "ReduceScatter".
func (k OpKind) String() string {
	if int(k) < len(opNames) && opNames[k] != "" {
		return opNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Call describes one rank's call: what backends post at a rendezvous and
// compare across ranks to detect mismatches.
type Call struct {
	Op    OpKind
	DType tensor.DType
	// Count is the per-rank unit in elements: the tensor for AllReduce,
	// Broadcast, Reduce, Send, Recv; the output chunk for ReduceScatter; the
	// input for AllGather; one chunk for AllToAll; 0 for Barrier and Split.
	Count int
	Red   ReduceOp // reductions only
	Root  int      // Broadcast, Reduce: the root; Send, Recv: the peer; else 0
}

// String reads like the call, e.g. "AllReduce(float32 x 1000, sum)".
func (c Call) String() string {
	switch c.Op {
	case OpBarrier, OpSplit:
		return c.Op.String() + "()"
	case OpAllReduce, OpReduceScatter:
		return fmt.Sprintf("%v(%v x %d, %v)", c.Op, c.DType, c.Count, c.Red)
	case OpReduce:
		return fmt.Sprintf("%v(%v x %d, root %d, %v)", c.Op, c.DType, c.Count, c.Root, c.Red)
	case OpBroadcast:
		return fmt.Sprintf("%v(%v x %d, root %d)", c.Op, c.DType, c.Count, c.Root)
	case OpSend, OpRecv:
		return fmt.Sprintf("%v(%v x %d, peer %d)", c.Op, c.DType, c.Count, c.Root)
	}
	return fmt.Sprintf("%v(%v x %d)", c.Op, c.DType, c.Count)
}

// Matches reports whether two ranks' collective calls agree. For a Send and
// a Recv it compares dtype and count only.
func (c Call) Matches(d Call) bool {
	if (c.Op == OpSend && d.Op == OpRecv) || (c.Op == OpRecv && d.Op == OpSend) {
		return c.DType == d.DType && c.Count == d.Count
	}
	return c == d
}

// Reduces reports whether the operation combines values.
func (c Call) Reduces() bool {
	return c.Op == OpAllReduce || c.Op == OpReduceScatter || c.Op == OpReduce
}

// CheckHost validates a tensor argument of a host backend: present, on the
// host, contiguous, not freed. It returns an error wrapping ErrInvalid.
func CheckHost(arg string, t *tensor.Tensor) error {
	switch {
	case t == nil:
		return fmt.Errorf("%w: %s is nil", ErrInvalid, arg)
	case !t.Device().IsCPU():
		return fmt.Errorf("%w: %s %v is not in host memory", ErrInvalid, arg, t)
	case !t.Contiguous():
		return fmt.Errorf("%w: %s %v is not contiguous", ErrInvalid, arg, t)
	case t.Storage().Freed():
		return fmt.Errorf("%w: %s %v: storage already freed", ErrInvalid, arg, t)
	}
	return nil
}

// CheckReduce validates the dtype and operator of a reduction: float32,
// float16, bfloat16 with any operator; int32, int64 with Sum, Max, Min.
func CheckReduce(dt tensor.DType, op ReduceOp) error {
	if !op.Valid() {
		return fmt.Errorf("%w: reduce operator %v: allowed sum, avg, max, min", ErrInvalid, op)
	}
	switch dt {
	case tensor.Float32, tensor.Float16, tensor.BFloat16:
		return nil
	case tensor.Int32, tensor.Int64:
		if op == Avg {
			return fmt.Errorf("%w: avg of %v: integer reductions allow sum, max, min", ErrUnsupported, dt)
		}
		return nil
	}
	return fmt.Errorf("%w: reduction over %v: allowed float32, float16, bfloat16, int32, int64", ErrUnsupported, dt)
}

// Overlap reports whether the byte ranges of two host tensors intersect.
func Overlap(a, b *tensor.Tensor) bool {
	if a.Bytes() == 0 || b.Bytes() == 0 {
		return false
	}
	pa, pb := uintptr(a.Ptr()), uintptr(b.Ptr())
	return pa < pb+uintptr(b.Bytes()) && pb < pa+uintptr(a.Bytes())
}

// SameMemory reports whether a and b are the same bytes (same address and
// size).
func SameMemory(a, b *tensor.Tensor) bool {
	return a.Bytes() == b.Bytes() && unsafe.Pointer(a.Ptr()) == unsafe.Pointer(b.Ptr())
}
