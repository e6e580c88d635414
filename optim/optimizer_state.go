package optim

import (
	"errors"
	"fmt"
	"sync"

	"github.com/deepgo-ml/deepgo/tensor"
)

// StateStore owns optimizer state and decides where it lives. Step calls
// Acquire before the kernel and Release after it, so an implementation can
// keep state on the host (HostStore), or page it in from NVMe on Acquire and
// write it back on Release, and the step runs wherever the state is.
type StateStore interface {
	// Acquire returns the state of group: for each name, one float32 tensor
	// per param, shaped like it, zero on first use. The tensors stay valid
	// until the matching Release. It fails if the group's existing state no
	// longer matches params in count or size.
	Acquire(group string, names []string, params []*tensor.Tensor) (map[string][]*tensor.Tensor, error)
	// Release ends the use begun by Acquire.
	Release(group string) error
	// Lookup returns the group's state without creating it (nil if none),
	// for checkpoints; the caller must not hold it across a Release that
	// may move it.
	Lookup(group string) map[string][]*tensor.Tensor
	// Close frees every group's state.
	Close() error
}

// StateDTyper is implemented by stores whose state is not float32
// (HostStore from NewTypedStore): the dtype Acquire allocates.
type StateDTyper interface {
	StateDType() tensor.DType
}

// stateDType is the dtype s keeps state in: float32 unless it says.
func stateDType(s StateStore) tensor.DType {
	if t, ok := s.(StateDTyper); ok {
		return t.StateDType()
	}
	return tensor.Float32
}

// StoreOf returns the StateStore an optimizer from New keeps its state in
// (nil for other Optimizer implementations): callers ask it where the
// state lives, e.g. whether it is paged from files.
func StoreOf(o Optimizer) StateStore {
	if f, ok := o.(*fused); ok {
		return f.store
	}
	return nil
}

// HostStore keeps all state resident in one memory: host memory from the C
// allocator (NewHostStore), or a backend's device (NewResidentStore).
// Safe for concurrent use.
type HostStore struct {
	mu     sync.Mutex
	groups map[string]map[string][]*tensor.Tensor
	alloc  func(tensor.DType, ...int) (*tensor.Tensor, error)
	dt     tensor.DType // the state dtype
}

// NewHostStore returns an empty HostStore over host memory.
func NewHostStore() *HostStore { return NewResidentStore(tensor.Empty) }

// NewResidentStore returns an empty HostStore whose state alloc allocates
// (zeroed), e.g. a device backend's Empty: the state of a device-resident
// optimizer.
func NewResidentStore(alloc func(tensor.DType, ...int) (*tensor.Tensor, error)) *HostStore {
	return NewTypedStore(alloc, tensor.Float32)
}

// NewTypedStore is NewResidentStore keeping the state in dt (float32, or
// bfloat16 for bf16.bf16_optimizer_states).
func NewTypedStore(alloc func(tensor.DType, ...int) (*tensor.Tensor, error), dt tensor.DType) *HostStore {
	return &HostStore{groups: map[string]map[string][]*tensor.Tensor{}, alloc: alloc, dt: dt}
}

// StateDType implements StateDTyper.
func (s *HostStore) StateDType() tensor.DType { return s.dt }

// Acquire implements StateStore.
func (s *HostStore) Acquire(group string, names []string, params []*tensor.Tensor) (map[string][]*tensor.Tensor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.groups[group]
	if st == nil {
		st = map[string][]*tensor.Tensor{}
		s.groups[group] = st
	}
	for _, name := range names {
		ts, ok := st[name]
		if !ok {
			var err error
			if ts, err = zerosLike(s.alloc, s.dt, params); err != nil {
				return nil, fmt.Errorf("%s of group %q: %w", name, group, err)
			}
			st[name] = ts
			continue
		}
		if len(ts) != len(params) {
			return nil, fmt.Errorf("%s of group %q has %d tensors, the group now has %d params", name, group, len(ts), len(params))
		}
		for i, t := range ts {
			if t.Numel() != params[i].Numel() {
				return nil, fmt.Errorf("%s[%d] of group %q has %d elements, params[%d] has %d", name, i, group, t.Numel(), i, params[i].Numel())
			}
		}
	}
	return st, nil
}

func zerosLike(alloc func(tensor.DType, ...int) (*tensor.Tensor, error), dt tensor.DType, params []*tensor.Tensor) ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(params))
	for i, p := range params {
		t, err := alloc(dt, p.Shape()...)
		if err != nil {
			for _, u := range out[:i] {
				u.Free()
			}
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// Release implements StateStore; host state stays where it is.
func (s *HostStore) Release(group string) error { return nil }

// Lookup implements StateStore.
func (s *HostStore) Lookup(group string) map[string][]*tensor.Tensor {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.groups[group]
	if st == nil {
		return nil
	}
	out := make(map[string][]*tensor.Tensor, len(st))
	for k, v := range st {
		out[k] = append([]*tensor.Tensor(nil), v...)
	}
	return out
}

// Close implements StateStore.
func (s *HostStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, st := range s.groups {
		for _, ts := range st {
			for _, t := range ts {
				if err := t.Free(); err != nil && !errors.Is(err, tensor.ErrFreed) {
					errs = append(errs, err)
				}
			}
		}
	}
	s.groups = map[string]map[string][]*tensor.Tensor{}
	return errors.Join(errs...)
}
