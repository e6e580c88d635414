package zero

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// planSubGroups cuts the owned chunks into runs of at most size elements
// (cutting inside units), or packs whole units for Lamb.
func TestPlanSubGroups(t *testing.T) {
	for _, c := range []struct {
		ns    []int
		size  int
		whole bool
		want  [][]subPart
	}{
		{[]int{4, 6}, 0, false, [][]subPart{{{0, 0, 4}, {1, 0, 6}}}},
		{[]int{4, 6}, 10, false, [][]subPart{{{0, 0, 4}, {1, 0, 6}}}},
		{[]int{4, 6}, 1e9, true, [][]subPart{{{0, 0, 4}, {1, 0, 6}}}},
		{[]int{4, 6}, 3, false, [][]subPart{{{0, 0, 3}}, {{0, 3, 1}, {1, 0, 2}}, {{1, 2, 3}}, {{1, 5, 1}}}},
		{[]int{4, 6}, 5, false, [][]subPart{{{0, 0, 4}, {1, 0, 1}}, {{1, 1, 5}}}},
		{[]int{10}, 4, false, [][]subPart{{{0, 0, 4}}, {{0, 4, 4}}, {{0, 8, 2}}}},
		{[]int{4, 6, 2, 3}, 5, true, [][]subPart{{{0, 0, 4}}, {{1, 0, 6}}, {{2, 0, 2}, {3, 0, 3}}}},
		{[]int{4, 0, 6}, 4, false, [][]subPart{{{0, 0, 4}}, {{2, 0, 4}}, {{2, 4, 2}}}},
	} {
		t.Run(fmt.Sprintf("%v/%d/whole=%v", c.ns, c.size, c.whole), func(t *testing.T) {
			got := planSubGroups(c.ns, c.size, c.whole)
			assert.Equal(t, c.want, got)
			for _, g := range got {
				n := 0
				for _, p := range g {
					n += p.n
				}
				if !c.whole && c.size > 0 {
					assert.LessOrEqual(t, n, c.size, "sub-group %v", g)
				}
			}
		})
	}
}
