package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEstimate(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"estimate", "--params", "354e6", "--largest-layer", "51e6", "--world", "1"}, &out, &errb)
	require.Zero(t, code, errb.String())
	for _, want := range []string{
		"HW: Setup with 1 node, 1 GPU per node.",
		"SW: Model with 354M total params, 51M largest layer params.",
		"    0.28GB |   6.12GB | offload_param=none, offload_optimizer=none, zero_init=1",
		" * stage 3",
	} {
		assert.Contains(t, out.String(), want)
	}
	out.Reset()
	code = run([]string{"estimate", "--params", "1.3e9", "--world", "8", "--stage", "2"}, &out, &errb)
	require.Zero(t, code, errb.String())
	assert.Contains(t, out.String(), "   58.11GB |   7.26GB | offload_optimizer=none", "zero2 table")
	code = run([]string{"estimate", "--world", "2"}, &out, &errb)
	assert.Equal(t, 2, code, "missing --params: exit code")
	assert.Contains(t, errb.String(), "--params", "missing --params")

}
