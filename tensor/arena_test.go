package tensor

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestArenaAccounting: buffers are counted while live, Reset frees them all
// (their storage reports freed), the peak survives Reset, and a buffer its
// user freed early is skipped, not freed twice.
func TestArenaAccounting(t *testing.T) {
	var a Arena
	x, err := a.Float32(4, 8)
	require.NoError(t, err)
	y, err := a.Int32(3)
	require.NoError(t, err)
	h, err := a.Empty(BFloat16, 5)
	require.NoError(t, err)
	assert.Equal(t, int64(4*8*4+3*4+5*2), a.Bytes(), "Bytes")
	assert.Equal(t, 3, a.Allocs(), "Allocs")
	assert.Equal(t, a.Bytes(), a.Peak(), "Peak")
	require.NoError(t, y.Free()) // freed early by its user
	a.Reset()
	for _, b := range []*Tensor{x, y, h} {
		assert.True(t, b.Storage().Freed(), "%v not freed by Reset", b)
	}
	_, err = x.Float32s()
	assert.ErrorIs(t, err, ErrFreed, "Float32s after Reset")
	assert.Zero(t, a.Bytes(), "Bytes after Reset")
	assert.Zero(t, a.Allocs(), "Allocs after Reset")
	assert.Equal(t, int64(4*8*4+3*4+5*2), a.Peak(), "Peak after Reset")
	_, err = a.Float32(2)
	assert.NoError(t, err, "allocating after Reset")
	a.Reset()
}

func TestArenaClosed(t *testing.T) {
	var a Arena
	x, err := a.Float32(16)
	require.NoError(t, err)
	a.Close()
	assert.True(t, x.Storage().Freed(), "Close left %v live", x)
	assert.Zero(t, a.Bytes(), "bytes after Close")
	_, err = a.Float32(2, 3)
	assert.ErrorIs(t, err, ErrArenaClosed, "Float32 on a closed arena")
	a.Close()
	a.Open()
	y, err := a.Float32(2)
	require.NoError(t, err, "Float32 after Open")
	a.Close()
	assert.True(t, y.Storage().Freed(), "second Close left a buffer live")
}

func TestArenaBadShape(t *testing.T) {
	var a Arena
	_, err := a.Float32(2, -1)
	assert.Error(t, err, "Float32(2, -1)")
	assert.Zero(t, a.Allocs(), "allocs after Float32(2, -1)")
	_, err = a.Empty(DType(99), 2)
	assert.Error(t, err, "Empty(DType(99)) succeeded")
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
				// assert, not require: FailNow must not run off the test's goroutine.
				if _, err := a.Float32(10); !assert.NoError(t, err) {
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 400, a.Allocs(), "Allocs")
	assert.Equal(t, int64(400*40), a.Bytes(), "Bytes")
	a.Reset()
}

func TestArenaContext(t *testing.T) {
	_, ok := ArenaFromContext(context.Background())
	assert.False(t, ok, "a bare context carries an arena")
	_, ok = ArenaFromContext(WithArena(context.Background(), nil))
	assert.False(t, ok, "a nil arena was reported present")
	a := new(Arena)
	got, ok := ArenaFromContext(WithArena(context.Background(), a))
	assert.True(t, ok, "ArenaFromContext of an arena's context")
	assert.Same(t, a, got, "ArenaFromContext")
}

func TestArenaHolds(t *testing.T) {
	var a Arena
	defer a.Reset()
	x, err := a.Float32(4, 2)
	require.NoError(t, err)
	own, err := Empty(Float32, 8)
	require.NoError(t, err)
	defer own.Free()
	view, err := x.Slice(2, 4)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		t    *Tensor
		want bool
	}{{"buffer", x, true}, {"view of a buffer", view, true}, {"other memory", own, false}, {"nil", nil, false}} {
		assert.Equal(t, c.want, a.Holds(c.t), c.name)
	}
	a.Reset()
	assert.False(t, a.Holds(x), "after Reset")
}
