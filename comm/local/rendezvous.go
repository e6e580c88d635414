package local

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/tensor"
)

// This file is the rendezvous: every operation is a slot, keyed by the
// group's call sequence number (collectives) or by the ordered pair and its
// own sequence number (Send/Recv). Each party posts its Call and its tensors;
// the slot completes when all parties have posted matching calls, or fails
// (timeout, mismatch, a failed rank, abort) and breaks the group. After
// completion no party can fail any more: each runs its bounded share of the
// data movement and meets the others at the slot's latches, so no rank
// returns while another may still touch its buffers.

// failure is why a slot or a group failed: the group ranks at fault and an
// error wrapping a comm sentinel.
type failure struct {
	ranks []int
	err   error
}

type slotKey struct {
	p2p      bool
	src, dst int // p2p only: group ranks of sender and receiver
	seq      uint64
}

// latch is a one-shot countdown: wait returns once n parties arrived.
type latch struct {
	n  atomic.Int32
	ch chan struct{}
}

func (l *latch) init(n int) { l.n.Store(int32(n)); l.ch = make(chan struct{}) }
func (l *latch) arrive() {
	if l.n.Add(-1) == 0 {
		close(l.ch)
	}
}
func (l *latch) wait() { <-l.ch }

// splitArg is what one rank brings to Split.
type splitArg struct {
	color, key int
	name       string
}

// splitOut is one rank's new group and rank in it.
type splitOut struct {
	g    *group
	rank int
}

type slot struct {
	key     slotKey
	parties []int // group rank of each position
	calls   []comm.Call
	posted  []bool
	in, out []*tensor.Tensor
	splits  []splitArg
	nposted int

	// Set under group.mu before ready is closed; read-only afterwards.
	complete bool
	fail     *failure
	ready    chan struct{}
	splitRes []splitOut

	end     latch // data-phase meeting point: no party leaves before all are done
	dataMu  sync.Mutex
	dataErr error // a kernel failure on some party, reported to all
}

func (s *slot) setDataErr(err error) {
	s.dataMu.Lock()
	if s.dataErr == nil {
		s.dataErr = err
	}
	s.dataMu.Unlock()
}

// group is the state a process group's members share.
type group struct {
	w       *World
	name    string
	members []int          // world rank of each group rank
	cpus    []*backend.CPU // each member's kernels
	timeout time.Duration

	mu     sync.Mutex
	slots  map[slotKey]*slot
	broken *failure
	nsplit int
}

func newGroup(w *World, name string, members []int) *group {
	g := &group{w: w, name: name, members: members, timeout: w.timeout, slots: map[slotKey]*slot{}}
	g.cpus = make([]*backend.CPU, len(members))
	for i, m := range members {
		g.cpus[i] = w.cpus[m]
	}
	w.register(g)
	return g
}

func (g *group) size() int { return len(g.members) }

// worldRanks maps group ranks to world ranks for messages.
func (g *group) worldRanks(rs []int) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = g.members[r]
	}
	return out
}

func (g *group) describe(rs []int) string {
	if g.w.size() == g.size() {
		return fmt.Sprint(rs)
	}
	return fmt.Sprintf("%v (world ranks %v)", rs, g.worldRanks(rs))
}

// brokenLocked is the failure every new call gets: the world's abort or the
// group's first failure.
func (g *group) brokenLocked() *failure {
	if f := g.w.aborted.Load(); f != nil {
		return f
	}
	if g.broken != nil {
		return &failure{ranks: g.broken.ranks, err: fmt.Errorf("%w: group broken by an earlier failure: %w", comm.ErrAborted, g.broken.err)}
	}
	return nil
}

// breakLocked records the group's first failure and fails every slot still
// collecting: their waiters return f at once.
func (g *group) breakLocked(f *failure) {
	if g.broken == nil {
		g.broken = f
	}
	for k, s := range g.slots {
		if !s.complete && s.fail == nil {
			s.fail = f
			close(s.ready)
		}
		delete(g.slots, k)
	}
}

func (g *group) breakWith(f *failure) {
	g.mu.Lock()
	g.breakLocked(f)
	g.mu.Unlock()
}

// post records one party's call in slot key, creating it, and completes or
// fails it. It returns the slot, or the failure that prevents joining.
func (g *group) post(key slotKey, parties []int, pos int, call comm.Call, in, out *tensor.Tensor, sp splitArg) (*slot, *failure) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.brokenLocked(); f != nil {
		return nil, f
	}
	s := g.slots[key]
	if s == nil {
		n := len(parties)
		s = &slot{key: key, parties: parties, calls: make([]comm.Call, n), posted: make([]bool, n),
			in: make([]*tensor.Tensor, n), out: make([]*tensor.Tensor, n), ready: make(chan struct{})}
		if call.Op == comm.OpSplit {
			s.splits = make([]splitArg, n)
		}
		s.end.init(n)
		g.slots[key] = s
	}
	s.posted[pos], s.calls[pos], s.in[pos], s.out[pos] = true, call, in, out
	if s.splits != nil {
		s.splits[pos] = sp
	}
	s.nposted++
	if s.nposted < len(parties) {
		return s, nil
	}
	if f := g.mismatch(s); f != nil {
		g.breakLocked(f)
		return s, f
	}
	if s.splits != nil {
		g.split(s)
	}
	s.complete = true
	delete(g.slots, key)
	close(s.ready)
	return s, nil
}

// mismatch returns nil when every posted call matches, else a failure that
// lists the calls and blames the ranks outside the largest class of
// matching calls (ties: the class holding the lowest rank; both parties of
// a Send/Recv pair).
func (g *group) mismatch(s *slot) *failure {
	ref, best := -1, 0
	for p := range s.posted {
		if !s.posted[p] {
			continue
		}
		n := 0
		for q := range s.posted {
			if s.posted[q] && s.calls[p].Matches(s.calls[q]) {
				n++
			}
		}
		if n > best {
			ref, best = p, n
		}
	}
	if ref < 0 || best == s.nposted {
		return nil
	}
	var bad []int
	var desc []string
	for p, ok := range s.posted {
		if !ok {
			continue
		}
		r := s.parties[p]
		desc = append(desc, fmt.Sprintf("rank %d: %v", r, s.calls[p]))
		if !s.calls[ref].Matches(s.calls[p]) || s.key.p2p {
			bad = append(bad, r)
		}
	}
	return &failure{ranks: bad, err: fmt.Errorf("%w: ranks %s called something else: %s",
		comm.ErrMismatch, g.describe(bad), strings.Join(desc, "; "))}
}

// await waits for the slot to complete or fail, failing it when ctx (the
// caller's context under the group's timeout) ends. caller is the caller's
// own context: when it is the one that ended, the error says so and wraps
// its error (context.DeadlineExceeded or context.Canceled) instead of
// reading as the group's timeout; the ranks that had not joined are still
// the ones named (a roll call under a short deadline finds the missing
// ranks that way).
func (g *group) await(ctx, caller context.Context, s *slot, pos int, started time.Time) *failure {
	select {
	case <-s.ready:
	case <-ctx.Done():
		g.mu.Lock()
		if !s.complete && s.fail == nil {
			var missing []int
			for p, ok := range s.posted {
				if !ok {
					missing = append(missing, s.parties[p])
				}
			}
			waited := time.Since(started).Round(time.Millisecond)
			f := g.mismatch(s)
			switch {
			case f != nil:
				f.err = fmt.Errorf("%w; ranks %s had not joined after %v", f.err, g.describe(missing), waited)
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				callers := errors.Is(caller.Err(), context.DeadlineExceeded)
				f = &failure{ranks: missing, err: comm.NotJoined(callers, waited, g.describe(missing), nil)}
			default:
				me := s.parties[pos]
				f = &failure{ranks: []int{me}, err: fmt.Errorf("%w: rank %d cancelled its call: %w", comm.ErrAborted, me, ctx.Err())}
			}
			g.breakLocked(f)
		}
		g.mu.Unlock()
		<-s.ready
	}
	return s.fail
}

// split computes the new groups of a completed Split slot (under g.mu).
func (g *group) split(s *slot) {
	g.nsplit++
	byColor := map[int][]int{} // color -> positions
	for pos, a := range s.splits {
		if a.color >= 0 {
			byColor[a.color] = append(byColor[a.color], pos)
		}
	}
	s.splitRes = make([]splitOut, len(s.splits))
	for color, ps := range byColor {
		sort.SliceStable(ps, func(i, j int) bool {
			a, b := s.splits[ps[i]], s.splits[ps[j]]
			if a.key != b.key {
				return a.key < b.key
			}
			return ps[i] < ps[j]
		})
		members := make([]int, len(ps))
		for i, p := range ps {
			members[i] = g.members[p]
		}
		name := s.splits[ps[0]].name
		if name == "" {
			name = fmt.Sprintf("%s/split%d:%d", g.name, g.nsplit, color)
		}
		ng := newGroup(g.w, name, members)
		for i, p := range ps {
			s.splitRes[p] = splitOut{g: ng, rank: i}
		}
	}
}
