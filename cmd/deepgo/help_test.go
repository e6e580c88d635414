package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHelpExitsZero: -h and --help print a usage and exit 0 in every
// command and subcommand, as "deepgo -h" does; an unknown flag is still a
// usage error (2).
func TestHelpExitsZero(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"config", "-h"}, 0},
		{[]string{"config", "explain", "-h"}, 0},
		{[]string{"config", "explain", "--help"}, 0},
		{[]string{"config", "check", "-h"}, 0},
		{[]string{"ckpt", "-h"}, 0},
		{[]string{"ckpt", "--help"}, 0},
		{[]string{"ckpt", "inspect", "-h"}, 0},
		{[]string{"ckpt", "consolidate", "--help"}, 0},
		{[]string{"estimate", "-h"}, 0},
		{[]string{"selftest", "-h"}, 0},
		{[]string{"doctor", "-h"}, 0},
		{[]string{"doctor", "--help"}, 0},
		{[]string{"plot", "-h"}, 0},
		{[]string{"train", "-h"}, 0},
		{[]string{"launch", "-h"}, 0},
		{[]string{"config", "check", "-nope"}, 2},
		{[]string{"ckpt", "inspect", "-nope"}, 2},
		{[]string{"estimate", "-nope"}, 2},
		{[]string{"doctor", "-nope"}, 2},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			assert.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			assert.Contains(t, strings.ToLower(out.String()+errb.String()), "usage")
			assert.NotContains(t, out.String()+errb.String(), `unknown key "`)
		})
	}
}
