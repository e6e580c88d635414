package data

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Position is where a sampler is in its sequence: the epoch, the number
// of this rank's samples already handed out in it, and the number of ranks
// that drew them. A checkpoint saves it as JSON
// ({"epoch":2,"index":40,"world":4}) and SetPosition resumes from it, at
// the same or another world size.
type Position struct {
	Epoch int `json:"epoch"`
	Index int `json:"index"`
	// World is the data-parallel size the position was taken at; 0 (a
	// position saved before it was recorded) means the sampler's own.
	World int `json:"world,omitempty"`
}

// DistributedSampler splits sample indices [0, N) among data-parallel
// ranks like torch's DistributedSampler: every epoch the N indices are
// shuffled by (Seed, epoch) — the same permutation on every rank — and rank
// r takes positions r, r+World, r+2*World, ... so the shards are disjoint.
// The tail that does not divide by World is dropped, so every rank sees
// the same number of samples per epoch (no rank waits on a short shard).
type DistributedSampler struct {
	N, Rank, World int
	Seed           uint64
	Shuffle        bool
	pos            Position
	perm           []int
	permEpoch      int
}

// NewDistributedSampler checks the arguments and starts at epoch 0.
func NewDistributedSampler(n, rank, world int, seed uint64, shuffle bool) (*DistributedSampler, error) {
	if world < 1 || rank < 0 || rank >= world {
		return nil, fmt.Errorf("data.NewDistributedSampler: rank %d of world %d: need 0 <= rank < world", rank, world)
	}
	if n < world {
		return nil, fmt.Errorf("data.NewDistributedSampler: %d samples for %d ranks: need at least one per rank", n, world)
	}
	return &DistributedSampler{N: n, Rank: rank, World: world, Seed: seed, Shuffle: shuffle, permEpoch: -1}, nil
}

// PerRank is the number of samples each rank gets per epoch.
func (s *DistributedSampler) PerRank() int { return s.N / s.World }

// Position is the current position.
func (s *DistributedSampler) Position() Position {
	p := s.pos
	p.World = s.World
	return p
}

// SetPosition resumes at p (from a checkpoint). A position taken at
// another world size continues where the ranks together stopped: the
// epoch's first Index*World positions were handed out, so each of this
// sampler's ranks resumes at that count over its World, which must divide
// it, or samples would be repeated or skipped: an error. Within the first
// epoch, steps of a global batch the new world divides always resume; once
// an epoch ended inside a batch (the per-rank share of N not a multiple of
// the per-rank batch) the count may not divide. A position at the very end
// of an epoch resumes at the start of the next.
func (s *DistributedSampler) SetPosition(p Position) error {
	const op = "data.DistributedSampler.SetPosition"
	if p.Epoch < 0 {
		return fmt.Errorf("%s: %+v: epoch %d: must be >= 0", op, p, p.Epoch)
	}
	if p.World < 0 {
		return fmt.Errorf("%s: %+v: world %d: must be >= 0 (0: this sampler's %d)", op, p, p.World, s.World)
	}
	if p.World != 0 && p.World != s.World {
		if p.Index == s.N/p.World { // Next moves on lazily: the epoch is done
			p = Position{Epoch: p.Epoch + 1, World: p.World}
		}
		if p.Index < 0 || p.Index > s.N/p.World {
			return fmt.Errorf("%s: %+v: index must be in [0, %d] for %d samples over %d ranks", op, p, s.N/p.World, s.N, p.World)
		}
		drawn := p.Index * p.World
		if drawn%s.World != 0 {
			return fmt.Errorf("%s: %+v: the %d ranks had handed out %d samples of epoch %d, which %d ranks cannot continue without repeating or skipping some (resume at a world size dividing %d)", op, p, p.World, drawn, p.Epoch, s.World, drawn)
		}
		p.Index = drawn / s.World
	}
	if p.Index < 0 || p.Index > s.PerRank() {
		return fmt.Errorf("%s: %+v: index must be in [0, %d]", op, p, s.PerRank())
	}
	s.pos = Position{Epoch: p.Epoch, Index: p.Index}
	return nil
}

// MarshalPosition is the position as JSON, for a checkpoint.
func (s *DistributedSampler) MarshalPosition() ([]byte, error) { return json.Marshal(s.Position()) }

// UnmarshalPosition resumes from JSON written by MarshalPosition.
func (s *DistributedSampler) UnmarshalPosition(b []byte) error {
	var p Position
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields() // a misspelt key would silently restart the epoch
	if err := d.Decode(&p); err != nil {
		return fmt.Errorf("data.DistributedSampler: position %s: %w (want {\"epoch\":E,\"index\":I,\"world\":W})", b, err)
	}
	return s.SetPosition(p)
}

// order is the epoch's permutation of [0, N).
func (s *DistributedSampler) order(epoch int) []int {
	if s.permEpoch == epoch {
		return s.perm
	}
	if s.perm == nil {
		s.perm = make([]int, s.N)
	}
	for i := range s.perm {
		s.perm[i] = i
	}
	if s.Shuffle {
		r := rand.New(rand.NewPCG(s.Seed, uint64(epoch)))
		r.Shuffle(len(s.perm), func(i, j int) { s.perm[i], s.perm[j] = s.perm[j], s.perm[i] })
	}
	s.permEpoch = epoch
	return s.perm
}

// Next returns this rank's next k sample indices, moving to the next epoch
// (a new shuffle) when the current one runs out.
func (s *DistributedSampler) Next(k int) []int {
	if k < 0 {
		panic(fmt.Sprintf("data.DistributedSampler.Next(%d): a negative count", k))
	}
	out := make([]int, 0, k)
	for len(out) < k {
		if s.pos.Index >= s.PerRank() {
			s.pos = Position{Epoch: s.pos.Epoch + 1}
		}
		perm := s.order(s.pos.Epoch)
		out = append(out, perm[s.pos.Index*s.World+s.Rank])
		s.pos.Index++
	}
	return out
}
