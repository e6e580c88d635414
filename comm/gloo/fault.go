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

// resolve replaces each rank of ranks that broke its group earlier by the
// ranks it blamed (it left for their fault), with a note saying so.
func (o *op) resolve(ranks []int) ([]int, string) {
	c := o.c
	if r, err := o.storeGone(ranks); err != nil {
		// the reports live in the store: with it gone, its host is the
		// failure this rank can name (a survivor one call ahead of the
		// others would otherwise blame them all)
		return []int{r}, fmt.Sprintf("the store (served by rank %d) is gone too: %v", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var out []int
	var notes []string
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
	key := c.prefix + "/failed/" + o.id + "/"
	err := c.w.store.Set(ctx, key+strconv.Itoa(c.rank), []byte{1})
	for _, p := range o.peers {
		if err != nil {
			break
		}
		if _, err1 := c.w.store.Get(ctx, key+strconv.Itoa(p)); err1 != nil {
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
	named, notes := o.resolve(silent)
	how = fmt.Sprintf("ranks %v did not report the failure within %v (process gone or stuck)", silent, window.Round(time.Millisecond))
	if notes != "" {
		how += " (" + notes + ")"
	}
	return named, how
}
