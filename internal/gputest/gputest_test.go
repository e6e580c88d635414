package gputest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder is a testing.TB that records how Unavailable ended it.
type recorder struct {
	testing.TB
	how, msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.how, r.msg = "skip", fmt.Sprintf(format, args...)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.how, r.msg = "fail", fmt.Sprintf(format, args...)
}

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		env, how string
	}{{"", "skip"}, {"0", "skip"}, {"1", "fail"}} {
		t.Run("env="+tc.env, func(t *testing.T) {
			t.Setenv(Env, tc.env)
			r := &recorder{TB: t}
			Unavailable(r, "no GPU here (%d devices)", 0)
			require.Equal(t, tc.how, r.how, "%s=%q: %q", Env, tc.env, r.msg)
			require.True(t, strings.HasPrefix(r.msg, "no GPU here (0 devices)"), "%s=%q: %q", Env, tc.env, r.msg)
			if tc.how == "fail" {
				require.Contains(t, r.msg, Env+"=1", "the failure does not say why it is not a skip")
			}

		})
	}
}
