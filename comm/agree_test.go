package comm_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onRanks runs fn on every rank of a fresh local world of n ranks but
// those in absent, concurrently, and returns each rank's error (nil for
// the absent ones).
func onRanks(t *testing.T, n int, timeout time.Duration, absent []int, fn func(c comm.Comm) error) []error {
	t.Helper()
	w, err := local.NewWorld(n, local.Options{Timeout: timeout})
	require.NoError(t, err)
	defer w.Close()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		skip := false
		for _, a := range absent {
			skip = skip || a == r
		}
		if !skip {
			wg.Go(func() { errs[r] = fn(w.Comm(r)) })
		}
	}
	wg.Wait()
	return errs
}

var worlds = []int{1, 2, 4}

func TestAllGatherBytes(t *testing.T) {
	cases := []struct {
		name string
		of   func(r int) []byte
	}{
		{"equal", func(r int) []byte { return []byte{byte(r), 7, 8} }},
		{"different lengths", func(r int) []byte { return []byte(strings.Repeat("ab", r) + "!") }},
		{"some empty", func(r int) []byte { return make([]byte, r%2*5) }},
		{"all empty", func(int) []byte { return nil }},
	}
	for _, n := range worlds {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("n=%d/%s", n, tc.name), func(t *testing.T) {
				want := make([][]byte, n)
				for r := range want {
					want[r] = tc.of(r)
				}
				errs := onRanks(t, n, 10*time.Second, nil, func(c comm.Comm) error {
					got, err := comm.AllGatherBytes(context.Background(), c, tc.of(c.Rank()))
					if err != nil {
						return err
					}
					if len(got) != n {
						return fmt.Errorf("got %d parts, want %d", len(got), n)
					}
					for r := range got {
						if string(got[r]) != string(want[r]) {
							return fmt.Errorf("part %d is %q, want %q", r, got[r], want[r])
						}
					}
					return nil
				})
				for r, err := range errs {
					assert.NoError(t, err, "rank %d", r)
				}
			})
		}
	}
}

func TestAllGatherInt64s(t *testing.T) {
	for _, n := range worlds {
		for _, k := range []int{0, 1, 3} {
			t.Run(fmt.Sprintf("n=%d/k=%d", n, k), func(t *testing.T) {
				of := func(r int) []int64 {
					v := make([]int64, k)
					for i := range v {
						v[i] = int64(r)<<40 - int64(i) // sign and high bits survive
					}
					return v
				}
				var want []int64
				for r := range n {
					want = append(want, of(r)...)
				}
				errs := onRanks(t, n, 10*time.Second, nil, func(c comm.Comm) error {
					got, err := comm.AllGatherInt64s(context.Background(), c, of(c.Rank()))
					if err != nil {
						return err
					}
					if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
						return fmt.Errorf("got %v, want %v", got, want)
					}
					return nil
				})
				for r, err := range errs {
					assert.NoError(t, err, "rank %d", r)
				}
			})
		}
	}
}

// Ranks passing different numbers of values all fail with ErrMismatch.
func TestAllGatherInt64sUnequal(t *testing.T) {
	for _, n := range []int{2, 4} {
		errs := onRanks(t, n, 10*time.Second, nil, func(c comm.Comm) error {
			_, err := comm.AllGatherInt64s(context.Background(), c, make([]int64, 1+c.Rank()/(n-1)))
			return err
		})
		for r, err := range errs {
			assert.ErrorIs(t, err, comm.ErrMismatch, "n=%d rank %d", n, r)
		}
	}
}

func TestAgree(t *testing.T) {
	errOf := func(r int) error { return fmt.Errorf("disk full on rank %d", r) }
	cases := []struct {
		name    string
		failing []int // ranks that pass an error; -1 means an empty message
		want    map[int]string
	}{
		{"all succeed", nil, nil},
		{"rank 0 fails", []int{0}, map[int]string{0: "disk full on rank 0"}},
		{"last rank fails", []int{3}, map[int]string{3: "disk full on rank 3"}},
		{"two fail", []int{1, 2}, map[int]string{1: "disk full on rank 1", 2: "disk full on rank 2"}},
		{"empty message", []int{-1}, map[int]string{0: "error"}},
	}
	for _, n := range worlds {
		for _, tc := range cases {
			fails := map[int]error{}
			want := map[int]string{}
			for _, r := range tc.failing {
				if r == -1 {
					fails[0] = errors.New("")
				} else if r < n {
					fails[r] = errOf(r)
				}
			}
			for r, m := range tc.want {
				if r < n {
					want[r] = m
				}
			}
			t.Run(fmt.Sprintf("n=%d/%s", n, tc.name), func(t *testing.T) {
				errs := onRanks(t, n, 10*time.Second, nil, func(c comm.Comm) error {
					return comm.Agree(context.Background(), c, "write step7", fails[c.Rank()])
				})
				for r, err := range errs {
					if len(want) == 0 {
						assert.NoError(t, err, "rank %d", r)
						continue
					}
					// && stops at the first failed check, as the old
					// switch did, and before a nil re is read.
					var re *comm.RankError
					_ = assert.ErrorAs(t, err, &re, "rank %d: want a *comm.RankError", r) &&
						assert.Equal(t, "write step7", re.Phase, "rank %d: phase", r) &&
						assert.Equal(t, want, re.Errs, "rank %d: errs", r) &&
						assert.True(t, re.Local == fails[r], "rank %d: Local %v, want %v", r, re.Local, fails[r]) &&
						(fails[r] == nil || assert.ErrorIs(t, err, fails[r], "rank %d: does not unwrap to its own error", r)) &&
						assert.Equal(t, errs[0].Error(), err.Error(), "rank %d vs rank 0", r) &&
						assert.True(t, strings.HasPrefix(err.Error(), "write step7 failed on rank "), "rank %d: %q", r, err)
				}
			})
		}
	}
}

func TestAgreeString(t *testing.T) {
	cases := []struct {
		name string
		of   func(r int) string
		diff string // a substring of the error; "" for agreement
	}{
		{"same", func(int) string { return "global_step3" }, ""},
		{"empty", func(int) string { return "" }, ""},
		{"last differs", func(r int) string { return fmt.Sprintf("step%d", r/3) }, `rank 3 has "step1"`},
		{"rank 0 differs", func(r int) string { return fmt.Sprintf("x%d", min(r, 1)) }, `rank 0 has "x0", rank 1 has "x1"`},
	}
	for _, n := range worlds {
		for _, tc := range cases {
			values := make([]string, n)
			agreed := true
			for r := range values {
				values[r] = tc.of(r)
				agreed = agreed && values[r] == values[0]
			}
			t.Run(fmt.Sprintf("n=%d/%s", n, tc.name), func(t *testing.T) {
				errs := onRanks(t, n, 10*time.Second, nil, func(c comm.Comm) error {
					return comm.AgreeString(context.Background(), c, "tag", tc.of(c.Rank()))
				})
				for r, err := range errs {
					if agreed {
						assert.NoError(t, err, "rank %d", r)
						continue
					}
					// && stops at the first failed check, as the old
					// switch did, and before a nil me is read.
					var me *comm.MismatchError
					_ = assert.ErrorAs(t, err, &me, "rank %d: want a *comm.MismatchError", r) &&
						assert.ErrorIs(t, err, comm.ErrMismatch, "rank %d", r) &&
						assert.Equal(t, "tag", me.What, "rank %d", r) &&
						assert.Equal(t, values, me.Values, "rank %d", r) &&
						assert.True(t, strings.HasPrefix(err.Error(), "ranks disagree on the tag: rank 0 has "), "rank %d: %q", r, err) &&
						assert.ErrorContains(t, err, tc.diff, "rank %d", r)
				}
			})
		}
	}
}

// A rank that never joins makes every other rank fail within the group's
// timeout, with a comm *Error naming it, whichever helper they call.
func TestAgreementMissingRank(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ctx := context.Background()
	helpers := []struct {
		name string
		call func(c comm.Comm) error
	}{
		{"AllGatherBytes", func(c comm.Comm) error { _, err := comm.AllGatherBytes(ctx, c, []byte("x")); return err }},
		{"AllGatherInt64s", func(c comm.Comm) error { _, err := comm.AllGatherInt64s(ctx, c, []int64{1}); return err }},
		{"Agree", func(c comm.Comm) error { return comm.Agree(ctx, c, "commit", nil) }},
		{"Agree failing", func(c comm.Comm) error { return comm.Agree(ctx, c, "commit", errors.New("bad")) }},
		{"AgreeString", func(c comm.Comm) error { return comm.AgreeString(ctx, c, "tag", "a") }},
	}
	for _, n := range []int{2, 4} {
		for _, h := range helpers {
			t.Run(fmt.Sprintf("n=%d/%s", n, h.name), func(t *testing.T) {
				absent := n - 1
				start := time.Now()
				errs := onRanks(t, n, timeout, []int{absent}, h.call)
				elapsed := time.Since(start)
				// Ten seconds of slack for a loaded machine; a rank that
				// never gave up would hang until the test's own timeout.
				assert.GreaterOrEqual(t, elapsed, timeout, "took too little")
				assert.LessOrEqual(t, elapsed, timeout+10*time.Second, "took too long")
				for r, err := range errs {
					if r == absent {
						continue
					}
					var ce *comm.Error
					_ = assert.ErrorIs(t, err, comm.ErrTimeout, "rank %d", r) &&
						assert.ErrorAs(t, err, &ce, "rank %d", r) &&
						assert.Equal(t, []int{absent}, ce.Ranks, "rank %d: %v blames", r, err)
				}
			})
		}
	}
}

// A nil Comm is a world of one.
func TestAgreementNilComm(t *testing.T) {
	ctx := context.Background()
	b, err := comm.AllGatherBytes(ctx, nil, []byte("ab"))
	if assert.NoError(t, err, "AllGatherBytes") {
		assert.Equal(t, [][]byte{[]byte("ab")}, b, "AllGatherBytes")
	}
	v, err := comm.AllGatherInt64s(ctx, nil, []int64{-5, 6})
	if assert.NoError(t, err, "AllGatherInt64s") {
		assert.Equal(t, []int64{-5, 6}, v, "AllGatherInt64s")
	}
	assert.NoError(t, comm.AgreeString(ctx, nil, "tag", "t"), "AgreeString")
	assert.NoError(t, comm.Agree(ctx, nil, "p", nil), "Agree")
	bad := errors.New("bad")
	var re *comm.RankError
	err = comm.Agree(ctx, nil, "p", bad)
	assert.ErrorAs(t, err, &re, "Agree failing")
	assert.ErrorIs(t, err, bad, "Agree failing")
	assert.EqualError(t, err, "p failed on rank 0: bad", "Agree failing")
}

// A rank that calls Agree with a cancelled context stops every rank at
// once, and the error leads with the cancellation, naming the rank, not
// with "could not agree (did every rank take part?)"; the group's own
// timeout (comm.ErrTimeout) is not a cancellation.
func TestAgreeCancelled(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			start := time.Now()
			errs := onRanks(t, n, 10*time.Second, nil, func(c comm.Comm) error {
				ctx := context.Background()
				if c.Rank() == 1 {
					cctx, cancel := context.WithCancel(ctx)
					cancel()
					ctx = cctx
				} else {
					// the cancelled rank arrives first: a collective the
					// others have already completed would not notice
					time.Sleep(50 * time.Millisecond)
				}
				return comm.Agree(ctx, c, "commit", nil)
			})
			assert.Less(t, time.Since(start), 5*time.Second)
			for r, err := range errs {
				require.ErrorIs(t, err, context.Canceled, "rank %d", r)
				assert.True(t, comm.Cancelled(err), "rank %d", r)
				assert.ErrorContains(t, err, "commit: stopped: a rank's call was cancelled or past its deadline", "rank %d", r)
				assert.ErrorContains(t, err, "rank 1 cancelled its call", "rank %d", r)
			}
		})
	}
	assert.False(t, comm.Cancelled(comm.ErrTimeout))
	assert.True(t, comm.Cancelled(fmt.Errorf("x: %w", context.DeadlineExceeded)))
}
