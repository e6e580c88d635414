package comm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Golden values from DeepSpeed's tests/unit/runtime/pipe/test_topology.py.
func TestGridDeepSpeedMapping(t *testing.T) {
	g, err := PipeModelDataGrid(2, 2, 2)
	require.NoError(t, err)
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
		require.NoError(t, err)
		assert.Equal(t, c.want, fmt.Sprint(got), "Groups(%v)", c.axes)
	}
	// rank = pipe*4 + data*2 + model
	for r := range 8 {
		c := g.Coord(r)
		back, _ := g.Rank(c...)
		assert.Equal(t, []int{r / 4, r / 2 % 2, r % 2}, c, "Coord(%d)", r)
		assert.Equal(t, r, back, "Rank(Coord(%d))", r)
	}
	n, _ := g.Neighbor(5, AxisPipe, 1)
	assert.Equal(t, 1, n, "next pipe stage of 5 (wraps)")
	assert.Equal(t, "data[pipe=1,model=1]", g.GroupName(5, AxisData), "GroupName")
}

func TestGridErrors(t *testing.T) {
	for _, c := range []struct {
		axes []string
		dims []int
	}{{nil, nil}, {[]string{"a", "a"}, []int{1, 1}}, {[]string{"a"}, []int{0}}, {[]string{"a"}, []int{1, 2}}} {
		_, err := NewGrid(c.axes, c.dims)
		assert.Error(t, err, "NewGrid(%v, %v) succeeded", c.axes, c.dims)
	}
	g, _ := PipeDataGrid(2, 3)
	_, err := g.Groups("model")
	assert.Error(t, err, "Groups on a missing axis succeeded")
	_, err = g.Rank(2, 0)
	assert.Error(t, err, "Rank out of range succeeded")
}
