//go:build race

package local

// Under the race detector the tables use shorter lengths: every op, dtype
// and world size is still covered, the data volume is a tenth.
const raceEnabled = true

func init() {
	lengths = []int{0, 1, 7, 129, 1001}
	bigLength = 33001
}
