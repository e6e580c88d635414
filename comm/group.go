package comm

import (
	"context"
	"fmt"
	"slices"
)

// NewSubgroup is a collective over parent: every rank of parent calls it
// with the same ranks (parent ranks, distinct), and the members get a Comm
// whose rank i is parent rank ranks[i]; non-members get nil and no error.
// Like torch.distributed.new_group.
func NewSubgroup(ctx context.Context, parent Comm, ranks []int) (Comm, error) {
	seen := map[int]bool{}
	for _, r := range ranks {
		if r < 0 || r >= parent.Size() || seen[r] {
			return nil, &Error{Op: "NewSubgroup", Group: parent.Name(), Rank: parent.Rank(),
				Err: fmt.Errorf("%w: ranks %v: want distinct ranks in [0, %d)", ErrInvalid, ranks, parent.Size())}
		}
		seen[r] = true
	}
	color, key := NoColor, 0
	if i := slices.Index(ranks, parent.Rank()); i >= 0 {
		color, key = 0, i
	}
	return parent.Split(ctx, color, key, fmt.Sprintf("%s%v", parent.Name(), ranks))
}
