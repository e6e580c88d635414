//go:build gloo

package gloo

/*
#include "gloo_shim.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
)

// Failures are told through the store as well as through Gloo's sockets,
// because a socket only says that a peer went away, not why: a rank whose
// group breaks publishes whom it blames (breakKey), and a rank that sees a
// peer vanish asks the store whether that peer blamed someone else before
// leaving, so that every survivor names the rank that actually failed.

// reportWindow bounds the post-mortem's wait for the peers' reports.
const reportWindow = 2 * time.Second

// breakReport is what a rank publishes when its group breaks.
type breakReport struct {
	Ranks []int  `json:"ranks"` // the ranks it blamed
	Err   string `json:"err"`
}

func (c *glooComm) breakKey(r int) string { return c.prefix + "/broken/" + strconv.Itoa(r) }

// publish records this rank's first failure on the group.
func (o *op) publish(err *comm.Error) {
	c := o.c
	var rep breakReport
	rep.Err = err.Error()
	rep.Ranks = err.Ranks
	b, _ := json.Marshal(rep)
	ctx, cancel := context.WithTimeout(context.Background(), min(reportWindow, c.w.timeout))
	defer cancel()
	c.w.store.Set(ctx, c.breakKey(c.rank), b) // best effort: the store may be gone
}

// storeGone probes the store when the group rank serving it is among
// ranks: a write that fails means the store, and so most likely its host,
// is gone (err non-nil, r that rank).
func (o *op) storeGone(ranks []int) (r int, err error) {
	c := o.c
	for _, q := range ranks {
		if q == c.rank || c.members[q] != c.w.storeHost {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(reportWindow, c.w.timeout))
		defer cancel()
		return q, c.w.store.Set(ctx, c.prefix+"/probe/"+strconv.Itoa(c.rank), []byte{1})
	}
	return -1, nil
}

// failedKey is the post-mortem key under which rank r reports call id.
func (c *glooComm) failedKey(id string, r int) string {
	return c.prefix + "/failed/" + id + "/" + strconv.Itoa(r)
}

// prevID names the collective before this one ("" for the first and for
// Send and Recv, which are not in lockstep).
func (o *op) prevID() string {
	if !strings.HasPrefix(o.id, "c") || o.slot == 0 {
		return ""
	}
	return "c" + strconv.FormatUint(o.slot-1, 10)
}

// mark reports this rank's failure under the call's key and under the
// previous collective's: a rank that left that call (every peer's
// descriptor arrived) is not to blame for a peer still stuck in it, and
// the stuck peer's post-mortem counts it as reported instead of silent.
func (o *op) mark(ctx context.Context) error {
	c := o.c
	if p := o.prevID(); p != "" {
		if err := c.w.store.Set(ctx, c.failedKey(p, c.rank), []byte{1}); err != nil {
			return err
		}
	}
	return c.w.store.Set(ctx, c.failedKey(o.id, c.rank), []byte{1})
}

// resolve names the failure among ranks, the peers that did not join or
// report this call. A peer that reported the previous collective is alive
// and one call behind, stuck on someone else: it is dropped (its own
// post-mortem names the culprit) unless every peer is. Each remaining peer
// that broke its group earlier is replaced by the ranks it blamed. wait
// bounds how long a behind peer's report may take to arrive. notes says
// what was inferred.
func (o *op) resolve(ranks []int, wait time.Duration) ([]int, string) {
	c := o.c
	if r, err := o.storeGone(ranks); err != nil {
		// the reports live in the store: with it gone, its host is the
		// failure this rank can name (a survivor one call ahead of the
		// others would otherwise blame them all)
		return []int{r}, fmt.Sprintf("the store (served by rank %d) is gone too: %v", r, err)
	}
	var notes []string
	if p := o.prevID(); p != "" {
		// sequential waits share one deadline: past it, Get only checks
		ctx, cancel := context.WithTimeout(context.Background(), max(wait, 100*time.Millisecond))
		var gone, behind []int
		for _, r := range ranks {
			if _, err := c.w.store.Get(ctx, c.failedKey(p, r)); err == nil {
				behind = append(behind, r)
			} else {
				gone = append(gone, r)
			}
		}
		cancel()
		if len(behind) > 0 && len(gone) > 0 {
			notes = append(notes, fmt.Sprintf("ranks %v are alive, still failing the previous call", behind))
			ranks = gone
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var out []int
	for _, r := range ranks {
		b, err := c.w.store.Get(ctx, c.breakKey(r))
		var rep breakReport
		if err != nil || json.Unmarshal(b, &rep) != nil || len(rep.Ranks) == 0 {
			out = append(out, r)
			continue
		}
		notes = append(notes, fmt.Sprintf("rank %d left after: %s", r, rep.Err))
		for _, q := range rep.Ranks {
			if q != c.rank {
				out = append(out, q)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), strings.Join(notes, "; ")
}

// postMortem runs after Gloo failed: this rank closes its connections (so
// that the peers waiting on it fail now rather than at their deadline),
// reports under the call's key in the store, and names the peers that do
// not report by the call's deadline plus the report window: dead, or stuck
// outside the call. (A survivor can be stuck inside the call on a healthy
// connection to another survivor until its own deadline: it reports then.)
// If the store itself fails, its host is named.
func (o *op) postMortem() (silent []int, how string) {
	c := o.c
	C.dg_gloo_close(c.ctx)
	window := max(o.left(), 0) + min(reportWindow, c.w.timeout)
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	err := o.mark(ctx)
	for _, p := range o.peers {
		if err != nil {
			break
		}
		if _, err1 := c.w.store.Get(ctx, c.failedKey(o.id, p)); err1 != nil {
			silent = append(silent, p)
		}
	}
	if err != nil {
		for r, m := range c.members {
			if m == c.w.storeHost && r != c.rank {
				return []int{r}, fmt.Sprintf("the store (served by rank %d) failed too: %v", r, err)
			}
		}
		return nil, fmt.Sprintf("the store failed too: %v", err)
	}
	if len(silent) == 0 {
		return nil, "every rank reported the failure"
	}
	named, notes := o.resolve(silent, 0) // a behind peer reported before its own window ended
	how = fmt.Sprintf("ranks %v did not report the failure within %v (process gone or stuck)", silent, window.Round(time.Millisecond))
	if notes != "" {
		how += " (" + notes + ")"
	}
	return named, how
}
