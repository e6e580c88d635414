package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestEstimate(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"estimate", "--params", "354e6", "--largest-layer", "51e6", "--world", "1"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"HW: Setup with 1 node, 1 GPU per node.",
		"SW: Model with 354M total params, 51M largest layer params.",
		"    0.28GB |   6.12GB | offload_param=none, offload_optimizer=none, zero_init=1",
		" * stage 3",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"estimate", "--params", "1.3e9", "--world", "8", "--stage", "2"}, &out, &errb); code != 0 {
		t.Fatal(errb.String())
	}
	if !strings.Contains(out.String(), "   58.11GB |   7.26GB | offload_optimizer=none") {
		t.Errorf("zero2 table:\n%s", out.String())
	}
	if code := run([]string{"estimate", "--world", "2"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--params") {
		t.Errorf("missing --params: exit %d, %q", code, errb.String())
	}
}
