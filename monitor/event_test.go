package monitor

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Values are written as DeepSpeed's csv monitor writes them: Python's
// repr(float) (checked against python3's output), ints for counts.
func TestEventText(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0.1, "0.1"}, {1, "1.0"}, {100, "100.0"}, {1e16, "1e+16"}, {1.5e-05, "1.5e-05"},
		{0.0001, "0.0001"}, {123456789, "123456789.0"}, {1e22, "1e+22"}, {-2.5, "-2.5"},
		{math.Pow(2, -30), "9.313225746154785e-10"}, {math.Nextafter(0.3, 1), "0.30000000000000004"},
		{1e15, "1000000000000000.0"}, {9999999999999998, "9999999999999998.0"},
		{math.NaN(), "nan"}, {math.Inf(1), "inf"}, {math.Inf(-1), "-inf"}, {0, "0.0"},
	} {
		assert.Equal(t, c.want, Event{Value: c.v}.text(), "%v", c.v)
	}
}

// crossing warns once per crossing and again after a recovery.
func TestCrossing(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		name      string
		wasOver   bool
		value     float64
		over      bool
		shouldWrn bool
	}{
		{"under stays quiet", false, 10, false, false},
		{"crossing warns", false, 25, true, true},
		{"well over warns", false, 90, true, true},
		{"still over is quiet", true, 30, true, false},
		{"recovery is quiet", true, 19, false, false},
		{"just under stays over", true, 24, true, false},
		{"under the re-arm line rearms", true, 19.9, false, false},
		{"no measurement keeps over", true, nan, true, false},
		{"no measurement keeps under", false, nan, false, false},
	} {
		over, warn := crossing(c.wasOver, c.value, 25)
		assert.Equal(t, c.over, over, c.name)
		assert.Equal(t, c.shouldWrn, warn, c.name)
	}
	// a sequence: over, over, under, over warns twice; hovering about the
	// limit (24, 26) does not warn again until below 20
	was, n := false, 0
	for _, v := range []float64{30, 40, 10, 26, nan, 27, 24, 26, 21, 25} {
		var w bool
		was, w = crossing(was, v, 25)
		if w {
			n++
		}
	}
	assert.Equal(t, 2, n, "warnings over the sequence")
}

func TestEventTextInt(t *testing.T) {
	assert.Equal(t, "123", Event{Value: 123, Int: true}.text())
	assert.Equal(t, "nan", Event{Value: math.NaN(), Int: true}.text())
}
