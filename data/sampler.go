package data

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// Position is where a sampler is in its sequence: the epoch and the number
// of this rank's samples already handed out in it. A checkpoint saves it
// as JSON ({"epoch":2,"index":40}) and SetPosition resumes from it.
type Position struct {
	Epoch int `json:"epoch"`
	Index int `json:"index"`
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
func (s *DistributedSampler) Position() Position { return s.pos }

// SetPosition resumes at p (from a checkpoint).
func (s *DistributedSampler) SetPosition(p Position) error {
	if p.Epoch < 0 || p.Index < 0 || p.Index > s.PerRank() {
		return fmt.Errorf("data.DistributedSampler.SetPosition: %+v: index must be in [0, %d]", p, s.PerRank())
	}
	s.pos = p
	return nil
}

// MarshalPosition is the position as JSON, for a checkpoint.
func (s *DistributedSampler) MarshalPosition() ([]byte, error) { return json.Marshal(s.pos) }

// UnmarshalPosition resumes from JSON written by MarshalPosition.
func (s *DistributedSampler) UnmarshalPosition(b []byte) error {
	var p Position
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("data.DistributedSampler: position: %w", err)
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
