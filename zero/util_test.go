package zero

import "fmt"

func fmtFloat(v float64) string { return fmt.Sprintf("%.2f", v) }
