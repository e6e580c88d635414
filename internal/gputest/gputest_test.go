package gputest

import (
	"fmt"
	"strings"
	"testing"
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
			if r.how != tc.how || !strings.HasPrefix(r.msg, "no GPU here (0 devices)") {
				t.Fatalf("%s=%q: %s %q, want %s", Env, tc.env, r.how, r.msg, tc.how)
			}
			if tc.how == "fail" && !strings.Contains(r.msg, Env+"=1") {
				t.Fatalf("the failure does not say why it is not a skip: %q", r.msg)
			}
		})
	}
}
