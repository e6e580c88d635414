package flops

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// DeepSpeed's number_to_string family, values checked against Python's
// f"{round(x, 2):g}".
func TestNumberStrings(t *testing.T) {
	cases := []struct{ got, want string }{
		{num(0), "0 "},
		{num(999), "999 "},
		{num(1000), "1 K"},
		{num(124439808), "124.44 M"},
		{num(2.5e9), "2.5 G"},
		{num(3.14159e12), "3.14 T"},
		{num(0.09237), "92.37 m"},
		{num(5e-7), "0.5 u"},
		{paramsStr(0), "0"},
		{paramsStr(124439808), "124.44 M"},
		{paramsStr(1.5e9), "1.5 B"},
		{macsStr(87050000000), "87.05 GMACs"},
		{flopsStr(1.88e12), "1.88 TFLOPS"},
		{durStr(92370 * time.Microsecond), "92.37 ms"},
		{durStr(1500 * time.Millisecond), "1.5 s"},
		{pyG(100), "100"},
		{pyG(33.335), "33.34"},
		{pyG(12.0049), "12"},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, tc.got)
	}
}
