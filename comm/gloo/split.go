//go:build gloo

package gloo

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
)

// Split exchanges every rank's color and key in its descriptor, then each
// new group connects a Gloo context of its own under the parent's store
// keys; the lowest-key member publishes the group's name there.
func (c *glooComm) Split(ctx context.Context, color, key int, name string) (comm.Comm, error) {
	var argErr error
	if color < comm.NoColor {
		argErr = fmt.Errorf("%w: color %d: want >= 0 or NoColor", comm.ErrInvalid, color)
	}
	o := c.start(ctx, desc{call: comm.Call{Op: comm.OpSplit}, color: color, key: key}, argErr)
	var out *glooComm
	err := c.run(o, func(left time.Duration) error {
		if color == comm.NoColor {
			return nil
		}
		var ranks []int
		for r, d := range o.all {
			if d.color == color {
				ranks = append(ranks, r)
			}
		}
		sort.Slice(ranks, func(i, j int) bool {
			a, b := o.all[ranks[i]], o.all[ranks[j]]
			if a.key != b.key {
				return a.key < b.key
			}
			return ranks[i] < ranks[j]
		})
		members := make([]int, len(ranks))
		rank := 0
		for i, r := range ranks {
			members[i] = c.members[r]
			if r == c.rank {
				rank = i
			}
		}
		prefix := fmt.Sprintf("%s/split%d/color%d", c.prefix, o.slot, color)
		sctx, cancel := context.WithTimeout(o.ctx, left)
		defer cancel()
		if rank == 0 {
			if name == "" {
				name = fmt.Sprintf("%s/split%d:%d", c.name, o.slot, color)
			}
			if err := c.w.store.Set(sctx, prefix+"/name", []byte(name)); err != nil {
				return fmt.Errorf("%w: publishing the group's name: %w", comm.ErrAborted, err)
			}
		}
		b, err := c.w.store.Get(sctx, prefix+"/name")
		if err != nil {
			return fmt.Errorf("%w: reading the group's name from rank %d: %w", comm.ErrTimeout, ranks[0], err)
		}
		out, err = c.w.connect(sctx, prefix, string(b), rank, members)
		return err
	})
	if err != nil || out == nil {
		return nil, err
	}
	return out, nil
}
