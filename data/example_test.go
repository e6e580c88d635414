package data_test

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/data"
)

// A synthetic corpus, two data-parallel ranks, and one batch of rank 0.
func Example() {
	m, _ := data.NewMarkov(32, 1, 4, 1)
	corpus := &data.Tokens{IDs: m.Generate(10000, 2), Vocab: 32}
	const T = 16
	s, _ := data.NewDistributedSampler(corpus.NumWindows(T), 0, 2, 7, true)
	b := corpus.MakeBatch(s.Next(4), T)
	fmt.Println(b.B, b.T, len(b.Inputs), s.Position())
	fmt.Printf("entropy floor %.3f nats/token\n", m.EntropyRate())
	// Output:
	// 4 16 64 {0 4 2}
	// entropy floor 1.106 nats/token
}
