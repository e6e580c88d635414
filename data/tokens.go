package data

import (
	"fmt"
	"os"

	"github.com/deepgo-ml/deepgo/model"
)

// Tokens is a token stream: the documents of a dataset concatenated in row
// order. Windows of the stream, not documents, are the training examples.
type Tokens struct {
	IDs   []int32
	Vocab int // one more than the largest id (at least the declared vocabulary)
}

func newTokens(ids []int32, vocab int) (*Tokens, error) {
	for _, id := range ids {
		if id < 0 {
			return nil, fmt.Errorf("negative token id %d", id)
		}
		if int(id) >= vocab {
			vocab = int(id) + 1
		}
	}
	// clipped: a window past the end must fail, not read the zeros an
	// append left in the capacity
	return &Tokens{IDs: ids[:len(ids):len(ids)], Vocab: vocab}, nil
}

// NumWindows is how many non-overlapping windows of t+1 tokens (t inputs
// and, shifted by one, t targets) the stream holds: consecutive windows
// share their boundary token, so every token is a target exactly once.
func (s *Tokens) NumWindows(t int) int {
	if t < 1 || len(s.IDs) < t+1 {
		return 0
	}
	return (len(s.IDs) - 1) / t
}

// Window returns window i of length t: inputs ids[i*t : i*t+t] and targets
// ids[i*t+1 : i*t+t+1] (slices of the stream: do not modify). Like an
// index expression it panics when i is not in [0, NumWindows(t)).
func (s *Tokens) Window(i, t int) (inputs, targets []int32) {
	if n := s.NumWindows(t); i < 0 || i >= n {
		panic(fmt.Sprintf("data.Tokens.Window(%d, %d): window index out of range [0, %d) of a %d-token stream", i, t, n, len(s.IDs)))
	}
	lo := i * t
	return s.IDs[lo : lo+t], s.IDs[lo+1 : lo+t+1]
}

// ReadText reads a file as bytes: each byte is a token (vocabulary 256).
func ReadText(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("data.ReadText: %w", err)
	}
	ids := make([]int32, len(b))
	for i, c := range b {
		ids[i] = int32(c)
	}
	return &Tokens{IDs: ids, Vocab: 256}, nil
}

// MakeBatch copies the windows idx (each of length t) into one batch: a
// model.TokenBatch, ready for a language model (b.MicroBatch() for an
// engine).
func (s *Tokens) MakeBatch(idx []int, t int) model.TokenBatch {
	b := model.TokenBatch{Inputs: make([]int32, 0, len(idx)*t), Targets: make([]int32, 0, len(idx)*t), B: len(idx), T: t}
	for _, i := range idx {
		in, tg := s.Window(i, t)
		b.Inputs = append(b.Inputs, in...)
		b.Targets = append(b.Targets, tg...)
	}
	return b
}
