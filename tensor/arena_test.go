package tensor

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// TestArenaAccounting: buffers are counted while live, Reset frees them all
// (their storage reports freed), the peak survives Reset, and a buffer its
// user freed early is skipped, not freed twice.
func TestArenaAccounting(t *testing.T) {
	var a Arena
	x, err := a.Float32(4, 8)
	if err != nil {
		t.Fatal(err)
	}
	y, err := a.Int32(3)
	if err != nil {
		t.Fatal(err)
	}
	h, err := a.Empty(BFloat16, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.Bytes(), int64(4*8*4+3*4+5*2); got != want {
		t.Errorf("Bytes = %d, want %d", got, want)
	}
	if a.Allocs() != 3 || a.Peak() != a.Bytes() {
		t.Errorf("Allocs = %d, Peak = %d, want 3 and %d", a.Allocs(), a.Peak(), a.Bytes())
	}
	if err := y.Free(); err != nil { // freed early by its user
		t.Fatal(err)
	}
	a.Reset()
	for _, b := range []*Tensor{x, y, h} {
		if !b.Storage().Freed() {
			t.Errorf("%v not freed by Reset", b)
		}
	}
	if _, err := x.Float32s(); !errors.Is(err, ErrFreed) {
		t.Errorf("Float32s after Reset: %v, want ErrFreed", err)
	}
	if a.Bytes() != 0 || a.Allocs() != 0 || a.Peak() != 4*8*4+3*4+5*2 {
		t.Errorf("after Reset: Bytes %d Allocs %d Peak %d", a.Bytes(), a.Allocs(), a.Peak())
	}
	if _, err := a.Float32(2); err != nil {
		t.Errorf("allocating after Reset: %v", err)
	}
	a.Reset()
}

func TestArenaClosed(t *testing.T) {
	var a Arena
	x, err := a.Float32(16)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	if !x.Storage().Freed() || a.Bytes() != 0 {
		t.Errorf("Close left %v live, %d bytes", x, a.Bytes())
	}
	if _, err := a.Float32(2, 3); !errors.Is(err, ErrArenaClosed) {
		t.Errorf("Float32 on a closed arena: %v, want ErrArenaClosed", err)
	}
	a.Close()
	a.Open()
	y, err := a.Float32(2)
	if err != nil {
		t.Fatalf("Float32 after Open: %v", err)
	}
	a.Close()
	if !y.Storage().Freed() {
		t.Error("second Close left a buffer live")
	}
}

func TestArenaBadShape(t *testing.T) {
	var a Arena
	if _, err := a.Float32(2, -1); err == nil || a.Allocs() != 0 {
		t.Errorf("Float32(2, -1) = %v with %d allocs, want an error and none", err, a.Allocs())
	}
	if _, err := a.Empty(DType(99), 2); err == nil {
		t.Error("Empty(DType(99)) succeeded")
	}
}

// TestArenaConcurrent: a module may allocate from several goroutines.
func TestArenaConcurrent(t *testing.T) {
	var a Arena
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, err := a.Float32(10); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if a.Allocs() != 400 || a.Bytes() != 400*40 {
		t.Errorf("Allocs %d Bytes %d, want 400 and %d", a.Allocs(), a.Bytes(), 400*40)
	}
	a.Reset()
}

func TestArenaContext(t *testing.T) {
	if _, ok := ArenaFromContext(context.Background()); ok {
		t.Error("a bare context carries an arena")
	}
	if _, ok := ArenaFromContext(WithArena(context.Background(), nil)); ok {
		t.Error("a nil arena was reported present")
	}
	a := new(Arena)
	got, ok := ArenaFromContext(WithArena(context.Background(), a))
	if !ok || got != a {
		t.Errorf("ArenaFromContext = %p, %v; want %p", got, ok, a)
	}
}
