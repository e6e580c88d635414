package doctor

import (
	"fmt"
	"math"
)

func gib(b float64) string { return fmt.Sprintf("%.1f GiB", b/(1<<30)) }

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
