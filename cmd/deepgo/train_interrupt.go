package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/deepgo-ml/deepgo/checkpoint"
)

// trainProgress is where a deepgo train run stands, for the line printed
// when it is interrupted: the steps rank 0 has finished and the save
// directory. A nil *trainProgress records nothing.
type trainProgress struct {
	mu      sync.Mutex
	step    int    // the last step rank 0 finished (the checkpoint's step after a resume); 0 before any
	saveDir string // checkpoint.save_dir, "" when the run saves none
}

// setStep records that rank 0 finished step.
func (p *trainProgress) setStep(step int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.step = step
	p.mu.Unlock()
}

// setSaveDir records the run's checkpoint.save_dir.
func (p *trainProgress) setSaveDir(dir string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.saveDir = dir
	p.mu.Unlock()
}

// interruptedLine is what deepgo train prints when interrupted: the last
// step finished and the last checkpoint committed to save_dir (what its
// latest file names, by this run or an earlier one), or none.
func (p *trainProgress) interruptedLine() string {
	p.mu.Lock()
	step, dir := p.step, p.saveDir
	p.mu.Unlock()
	last := "none"
	if dir != "" {
		if tag, err := checkpoint.ReadLatest(nil, dir); err == nil {
			last = filepath.Join(dir, tag)
		}
	}
	return fmt.Sprintf("deepgo train: interrupted at step %d (last checkpoint: %s)", step, last)
}

// interruptSignals are the signals that stop deepgo train with its
// interrupted line: SIGINT (Ctrl-C) and SIGTERM (deepgo launch stopping its
// processes, a job scheduler, kill).
var interruptSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}

// watchInterrupt waits for a signal on sig, then (when say) writes p's
// interrupted line to stderr and calls exit(128+N), the status a shell
// gives a process killed by signal N: 130 for SIGINT, 143 for SIGTERM. It
// returns when sig is closed without a signal.
func watchInterrupt(sig <-chan os.Signal, p *trainProgress, say bool, stderr io.Writer, exit func(int)) {
	s, ok := <-sig
	if !ok {
		return
	}
	if say {
		fmt.Fprintln(stderr, p.interruptedLine())
	}
	code := 130
	if n, ok := s.(syscall.Signal); ok {
		code = 128 + int(n)
	}
	exit(code)
}
