package model

import (
	"slices"
	"strings"
	"testing"
)

// cut is rank's shard of full (values 0, 1, 2, ... of shape shape) as
// Runs places it.
func cut(l TPLayout, shape []int, rank, n int) []int {
	total := 1
	for _, d := range shape {
		total *= d
	}
	out := make([]int, total/n)
	if !l.Split || n <= 1 {
		out = make([]int, total)
	}
	l.Runs(shape, rank, n, func(fo, lo, length int) {
		for i := range length {
			out[lo+i] = fo + i
		}
	})
	return out
}

func TestTPLayoutRuns(t *testing.T) {
	for _, c := range []struct {
		name  string
		l     TPLayout
		shape []int
		rank  int
		n     int
		want  []int
	}{
		{"replicated", TPLayout{}, []int{2, 2}, 1, 2, []int{0, 1, 2, 3}},
		{"one rank", TPLayout{Split: true}, []int{2, 2}, 0, 1, []int{0, 1, 2, 3}},
		{"rows", TPLayout{Split: true, Dim: 0}, []int{4, 2}, 1, 2, []int{4, 5, 6, 7}},
		{"columns", TPLayout{Split: true, Dim: 1}, []int{2, 4}, 1, 2, []int{2, 3, 6, 7}},
		// q, k, v of 2 rows each: rank 1 of 2 holds row 1 of each
		{"fused qkv rows", TPLayout{Split: true, Dim: 0, Parts: 3}, []int{6, 2}, 1, 2, []int{2, 3, 6, 7, 10, 11}},
		{"fused qkv bias", TPLayout{Split: true, Dim: 0, Parts: 3}, []int{12}, 0, 4, []int{0, 4, 8}},
		{"middle dim", TPLayout{Split: true, Dim: 1, Parts: 2}, []int{2, 4, 1}, 0, 2, []int{0, 2, 4, 6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.l.Check(c.shape, c.n); err != nil {
				t.Fatal(err)
			}
			if got := cut(c.l, c.shape, c.rank, c.n); !slices.Equal(got, c.want) {
				t.Fatalf("Runs: shard %d of %d = %v, want %v", c.rank, c.n, got, c.want)
			}
		})
	}
}

// TestTPLayoutRunsPartition: the shards of every rank cover each element
// of the full tensor exactly once, for every degree that divides it.
func TestTPLayoutRunsPartition(t *testing.T) {
	shape := []int{12, 3}
	for _, l := range []TPLayout{{Split: true}, {Split: true, Parts: 3}, {Split: true, Dim: 1}} {
		for _, n := range []int{1, 2, 3, 4} {
			if l.Check(shape, n) != nil {
				continue
			}
			seen := make([]int, 36)
			for r := range n {
				for _, i := range cut(l, shape, r, n) {
					seen[i]++
				}
			}
			for i, k := range seen {
				if k != 1 {
					t.Fatalf("%+v over %d: element %d in %d shards", l, n, i, k)
				}
			}
		}
	}
}

func TestTPLayoutCheck(t *testing.T) {
	for _, c := range []struct {
		l     TPLayout
		shape []int
		n     int
		want  string
	}{
		{TPLayout{Split: true, Dim: 2}, []int{4, 4}, 2, "no such dimension"},
		{TPLayout{Split: true, Parts: 3}, []int{9, 4}, 2, "does not split into 3 part(s) over 2 ranks"},
		{TPLayout{Split: true}, []int{6}, 4, "does not split into 1 part(s) over 4 ranks"},
	} {
		err := c.l.Check(c.shape, c.n)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%v, %d) with %+v = %v, want %q", c.shape, c.n, c.l, err, c.want)
		}
	}
}
