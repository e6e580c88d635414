package comm

import (
	"fmt"
	"testing"
)

// Golden values from DeepSpeed's tests/unit/runtime/pipe/test_topology.py.
func TestGridDeepSpeedMapping(t *testing.T) {
	g, err := PipeModelDataGrid(2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		axes []string
		want string
	}{
		{[]string{AxisPipe}, "[[0 4] [1 5] [2 6] [3 7]]"},
		{[]string{AxisData}, "[[0 2] [1 3] [4 6] [5 7]]"},
		{[]string{AxisModel}, "[[0 1] [2 3] [4 5] [6 7]]"},
		{[]string{AxisData, AxisModel}, "[[0 1 2 3] [4 5 6 7]]"},
		{[]string{AxisPipe, AxisData, AxisModel}, "[[0 1 2 3 4 5 6 7]]"},
	}
	for _, c := range cases {
		got, err := g.Groups(c.axes...)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("Groups(%v) = %v, want %s", c.axes, got, c.want)
		}
	}
	// rank = pipe*4 + data*2 + model
	for r := range 8 {
		c := g.Coord(r)
		if back, _ := g.Rank(c...); back != r || c[0] != r/4 || c[1] != r/2%2 || c[2] != r%2 {
			t.Errorf("Coord(%d) = %v (Rank back %d)", r, c, back)
		}
	}
	if n, _ := g.Neighbor(5, AxisPipe, 1); n != 1 {
		t.Errorf("next pipe stage of 5 = %d, want 1 (wraps)", n)
	}
	if s := g.GroupName(5, AxisData); s != "data[pipe=1,model=1]" {
		t.Errorf("GroupName = %q", s)
	}
}

func TestGridErrors(t *testing.T) {
	for _, c := range []struct {
		axes []string
		dims []int
	}{{nil, nil}, {[]string{"a", "a"}, []int{1, 1}}, {[]string{"a"}, []int{0}}, {[]string{"a"}, []int{1, 2}}} {
		if _, err := NewGrid(c.axes, c.dims); err == nil {
			t.Errorf("NewGrid(%v, %v) succeeded", c.axes, c.dims)
		}
	}
	g, _ := PipeDataGrid(2, 3)
	if _, err := g.Groups("model"); err == nil {
		t.Error("Groups on a missing axis succeeded")
	}
	if _, err := g.Rank(2, 0); err == nil {
		t.Error("Rank out of range succeeded")
	}
}
