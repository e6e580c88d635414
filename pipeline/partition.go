package pipeline

import (
	"fmt"
	"math"
)

// PartitionUniform splits numItems items into numParts contiguous parts of
// nearly equal size, as DeepSpeed's partition_uniform does: the first
// numItems%numParts parts get one extra item. If there are no more items
// than parts, part p gets item p and the trailing parts are empty. The
// result has numParts+1 non-decreasing boundaries from 0 to numItems.
func PartitionUniform(numItems, numParts int) ([]int, error) {
	if numItems < 0 {
		return nil, argError("numItems", numItems, "must not be negative")
	}
	if numParts < 1 {
		return nil, argError("numParts", numParts, "must be at least 1")
	}
	parts := make([]int, numParts+1)
	if numItems <= numParts {
		for p := range parts {
			parts[p] = min(p, numItems)
		}
		return parts, nil
	}
	chunk, residual := numItems/numParts, numItems%numParts
	for p := range parts {
		parts[p] = p*chunk + min(p, residual)
	}
	return parts, nil
}

// PartitionBalanced splits weights into numParts contiguous parts, as
// DeepSpeed's partition_balanced does: a dynamic program over prefix sums
// that minimises the spread (heaviest part minus lightest part), not the
// heaviest part alone, with ties going to the later split point. With no
// more weights than parts it returns PartitionUniform(len(weights),
// numParts). Weights must be finite; sums are float64, accumulated left to
// right as numpy.cumsum does. It takes O(len(weights)² · numParts) time.
func PartitionBalanced(weights []float64, numParts int) ([]int, error) {
	if numParts < 1 {
		return nil, argError("numParts", numParts, "must be at least 1")
	}
	n, m := len(weights), numParts
	if n <= m {
		return PartitionUniform(n, m)
	}
	prefix := make([]float64, n+1)
	for i, w := range weights {
		if math.IsNaN(w) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("%w: weights[%d] is %v, want a finite number", ErrInvalidArgument, i, w)
		}
		prefix[i+1] = prefix[i] + w
	}

	// cell (i, j) is the best way to cut the first i items into j parts:
	// the spread, heaviest and lightest part, and where the last part starts.
	// Unreached cells hold +Inf like DeepSpeed's np.full(..., np.inf);
	// lightest of (0, 0) is +Inf too, so the first part sets it.
	type cell struct {
		cost, heaviest, lightest float64
		start                    int
	}
	inf := math.Inf(1)
	dp := make([][]cell, n+1)
	for i := range dp {
		dp[i] = make([]cell, m+1)
		for j := range dp[i] {
			dp[i][j] = cell{cost: inf, heaviest: inf, lightest: inf}
		}
	}
	dp[0][0].cost, dp[0][0].heaviest = 0, 0
	for i := 1; i <= n; i++ {
		for j := 1; j <= min(i, m); j++ {
			best := &dp[i][j]
			for k := range i {
				part := prefix[i] - prefix[k]
				heaviest := max(dp[k][j-1].heaviest, part)
				lightest := min(dp[k][j-1].lightest, part)
				if cost := heaviest - lightest; best.cost >= cost {
					*best = cell{cost, heaviest, lightest, k}
				}
			}
		}
	}
	parts := make([]int, m+1)
	parts[m] = n
	for j := m; j >= 1; j-- {
		parts[j-1] = dp[parts[j]][j].start
	}
	return parts, nil
}
