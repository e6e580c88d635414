package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress draws a one-line progress bar on a terminal and nothing
// elsewhere, so logs and pipes get only the steps_per_print lines.
type progress struct {
	w     io.Writer
	total int
	on    bool
	last  time.Time
}

func newProgress(w io.Writer, total int) *progress {
	f, ok := w.(*os.File)
	on := false
	if ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			on = true
		}
	}
	return &progress{w: w, total: total, on: on}
}

// update redraws at most ten times a second.
func (p *progress) update(step int, loss float64) {
	if !p.on || p.total <= 0 || (time.Since(p.last) < 100*time.Millisecond && step != p.total) {
		return
	}
	p.last = time.Now()
	const width = 30
	done := width * step / p.total
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d loss %.4f", strings.Repeat("#", done), strings.Repeat(".", width-done), step, p.total, loss)
}

// clear erases the bar so a log line can take its place.
func (p *progress) clear() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
