//go:build !cuda

package nccl

import (
	"context"
	"errors"
	"testing"

	"github.com/deepgo-ml/deepgo/comm"
)

func TestNoCUDA(t *testing.T) {
	_, err := New(context.Background(), UniqueID{}, 0, 1, 0, Options{})
	var ce *comm.Error
	if !errors.As(err, &ce) || !errors.Is(err, ErrNoCUDA) || !errors.Is(err, comm.ErrUnsupported) {
		t.Fatalf("New: %v, want a *comm.Error wrapping ErrNoCUDA and ErrUnsupported", err)
	}
	if _, err := GetUniqueID(); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("GetUniqueID: %v", err)
	}
	if _, err := NewFromStore(context.Background(), nil, 0, 1, 0, Options{}); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("NewFromStore: %v", err)
	}
}
