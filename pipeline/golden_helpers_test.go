package pipeline

import (
	"fmt"
	"strings"
	"testing"
)

// logSummary logs how many records of each kind in a golden file matched,
// as a table.
func logSummary(t *testing.T, file string, kinds []string, matched, total map[string]int) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "golden summary for %s\n| %-40s | matched |\n", file, "kind")
	all, ok := 0, 0
	for _, k := range kinds {
		fmt.Fprintf(&b, "| %-40s | %3d/%-3d |\n", k, matched[k], total[k])
		all += total[k]
		ok += matched[k]
	}
	fmt.Fprintf(&b, "| %-40s | %3d/%-3d |", "all", ok, all)
	t.Log(b.String())
}
