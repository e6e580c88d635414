package checkpoint

import (
	"context"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Named is a tensor with its name.
type Named struct {
	Name   string
	Tensor *tensor.Tensor
}

// ReplicaMismatchError says that a tensor that should be identical on
// every data-parallel rank is not.
type ReplicaMismatchError struct {
	// Tensor is the first tensor (in the order given) that differs.
	Tensor string
	// Ranks lists the ranks whose copy differs from rank 0's.
	Ranks []int
	// Mismatched counts the tensors that differ.
	Mismatched int
}

// Error names the tensor and the ranks.
func (e *ReplicaMismatchError) Error() string {
	rs := make([]string, len(e.Ranks))
	for i, r := range e.Ranks {
		rs[i] = fmt.Sprint(r)
	}
	return fmt.Sprintf("checkpoint: replicated tensor %q differs from rank 0's on rank(s) %s (%d tensor(s) differ)", e.Tensor, strings.Join(rs, ", "), e.Mismatched)
}

// Hash is a 64-bit digest of a host tensor's bytes, dtype and shape: the
// CRC-32C and the IEEE CRC-32 of the bytes side by side.
func Hash(t *tensor.Tensor) (uint64, error) {
	b, err := t.RawBytes()
	if err != nil {
		return 0, err
	}
	desc := []byte(t.String())
	c := crc32.Update(crc32.Checksum(desc, castagnoli), castagnoli, b)
	i := crc32.Update(crc32.ChecksumIEEE(desc), crc32.IEEETable, b)
	return uint64(c)<<32 | uint64(i), nil
}

// VerifyReplicated is a collective over the data-parallel group c: every
// rank hashes ts (the same names in the same order on every rank), the
// hashes are all-gathered, and every rank returns the same
// *ReplicaMismatchError if any tensor differs between ranks.
func VerifyReplicated(ctx context.Context, c comm.Comm, ts []Named) error {
	if c == nil || c.Size() == 1 || len(ts) == 0 {
		return nil
	}
	n, w := len(ts), c.Size()
	// n hashes and a last word, 1 when this rank could not hash: it still
	// takes part, so that no rank waits for it
	mine := make([]int64, n+1)
	var herr error
	for i, t := range ts {
		h, err := Hash(t.Tensor)
		if err != nil {
			herr = fmt.Errorf("checkpoint: hashing %q: %w", t.Name, err)
			mine[n] = 1
			break
		}
		mine[i] = int64(h)
	}
	hs, err := comm.AllGatherInt64s(ctx, c, mine)
	switch {
	case herr != nil:
		return herr
	case err != nil:
		return fmt.Errorf("checkpoint: comparing replicated tensors: %w", err)
	}
	row := n + 1
	var failed []int
	for r := range w {
		if hs[r*row+n] != 0 {
			failed = append(failed, r)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("checkpoint: comparing replicated tensors: rank(s) %v could not hash theirs", failed)
	}
	var e *ReplicaMismatchError
	for i, t := range ts {
		var bad []int
		for r := 1; r < w; r++ {
			if hs[r*row+i] != hs[i] {
				bad = append(bad, r)
			}
		}
		if len(bad) == 0 {
			continue
		}
		if e == nil {
			e = &ReplicaMismatchError{Tensor: t.Name, Ranks: bad}
		}
		e.Mismatched++
	}
	if e != nil {
		return e
	}
	return nil
}
