package comm

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/tensor"
)

// The argument checks the host backends share. Each returns the Call the
// arguments describe, filled as far as they are valid (so that the other
// ranks can be told what this rank called), and an error wrapping
// ErrInvalid or ErrUnsupported that names the bad argument.

// CheckRank validates a root or peer argument: 0 <= r < size.
func CheckRank(what string, r, size int) error {
	if r < 0 || r >= size {
		return fmt.Errorf("%w: %s %d out of range [0, %d)", ErrInvalid, what, r, size)
	}
	return nil
}

// CheckChunked validates the arguments of ReduceScatter (small is dst, big
// is src) or AllGather (small is src, big is dst) on rank of a size-rank
// group: host tensors of one dtype, big holding size chunks of small's
// element count, overlapping only as big's chunk rank.
func CheckChunked(k OpKind, small, big *tensor.Tensor, smallName, bigName string, rank, size int) (Call, error) {
	call := Call{Op: k}
	if err := CheckHost(smallName, small); err != nil {
		return call, err
	}
	if err := CheckHost(bigName, big); err != nil {
		return call, err
	}
	call.DType, call.Count = small.DType(), small.Numel()
	switch {
	case small.DType() != big.DType():
		return call, fmt.Errorf("%w: %s is %v, %s is %v", ErrInvalid, bigName, big.DType(), smallName, small.DType())
	case big.Numel() != size*small.Numel():
		return call, fmt.Errorf("%w: %s has %d elements, want %d", ErrInvalid, bigName, big.Numel(), size*small.Numel())
	case Overlap(small, big) && uintptr(small.Ptr()) != uintptr(big.Ptr())+uintptr(rank*small.Bytes()):
		return call, fmt.Errorf("%w: %s overlaps %s other than as its chunk %d", ErrInvalid, smallName, bigName, rank)
	}
	return call, nil
}

// CheckAllToAll validates AllToAll's arguments in a size-rank group: host
// tensors of one dtype and equal element counts, a multiple of size, not
// overlapping.
func CheckAllToAll(dst, src *tensor.Tensor, size int) (Call, error) {
	call := Call{Op: OpAllToAll}
	if err := CheckHost("src", src); err != nil {
		return call, err
	}
	if err := CheckHost("dst", dst); err != nil {
		return call, err
	}
	call.DType, call.Count = src.DType(), src.Numel()/size
	switch {
	case dst.DType() != src.DType() || dst.Numel() != src.Numel() || src.Numel()%size != 0:
		return call, fmt.Errorf("%w: src %v and dst %v: want one dtype and equal multiples of %d elements", ErrInvalid, src, dst, size)
	case Overlap(dst, src):
		return call, fmt.Errorf("%w: dst overlaps src", ErrInvalid)
	}
	return call, nil
}

// CheckP2P validates Send's or Recv's (k's) arguments on rank of a
// size-rank group: a host tensor and a peer other than rank.
func CheckP2P(k OpKind, t *tensor.Tensor, peer, rank, size int) (Call, error) {
	call := Call{Op: k, Root: peer}
	if err := CheckHost("t", t); err != nil {
		return call, err
	}
	call.DType, call.Count = t.DType(), t.Numel()
	if err := CheckRank("peer", peer, size); err != nil {
		return call, err
	}
	if peer == rank {
		return call, fmt.Errorf("%w: peer %d is this rank", ErrInvalid, peer)
	}
	return call, nil
}
