package checkpoint

import "fmt"

// span copies n elements from element src of piece to element dst of the
// destination.
type span struct {
	piece       int
	src, dst, n int64
}

// planRange maps elements [off, off+n) of g onto its pieces. Elements in
// no piece must lie past g.Numel (padding, read as zero).
func planRange(g *Global, off, n int64) ([]span, error) {
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("tensor %q: range [%d, %d) is invalid", g.Name, off, off+n)
	}
	if !g.Sharded && off+n > g.Numel {
		return nil, fmt.Errorf("tensor %q: range [%d, %d) exceeds its %d elements", g.Name, off, off+n, g.Numel)
	}
	var out []span
	pos, end := off, off+n
	for i, p := range g.Pieces {
		lo, hi := max(pos, p.Offset), min(end, p.Offset+p.Length)
		if lo >= hi {
			continue
		}
		if lo > pos && pos < g.Numel {
			return nil, fmt.Errorf("tensor %q: elements [%d, %d) are in no piece", g.Name, pos, min(lo, g.Numel))
		}
		out = append(out, span{piece: i, src: lo - p.Offset, dst: lo - off, n: hi - lo})
		pos = hi
	}
	if pos < min(end, g.Numel) {
		return nil, fmt.Errorf("tensor %q: elements [%d, %d) are in no piece", g.Name, pos, min(end, g.Numel))
	}
	return out, nil
}

// Partition is the ZeRO split of a flat vector of numel elements over
// world ranks: padded to a multiple of align×world, rank r owns chunk r.
// It returns rank's offset and chunk length.
func Partition(numel int64, world, rank, align int) (off, n int64) {
	unit := int64(max(align, 1) * world)
	padded := max((numel+unit-1)/unit*unit, unit)
	n = padded / int64(world)
	return int64(rank) * n, n
}
