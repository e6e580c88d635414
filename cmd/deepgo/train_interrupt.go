package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/deepgo-ml/deepgo/checkpoint"
)

// trainProgress is where a deepgo train run stands, for the line printed
// when it is interrupted: the steps rank 0 has finished and the save
// directory, and what must be flushed before the process exits (rank 0's
// monitor files). A nil *trainProgress records nothing.
type trainProgress struct {
	mu      sync.Mutex
	step    int                      // the last step rank 0 finished (the checkpoint's step after a resume); 0 before any
	saveDir string                   // checkpoint.save_dir, "" when the run saves none
	flush   []func(step int) error   // called with step on an interrupt, before the exit
	saves   []func() <-chan struct{} // each rank's background save in flight (Trainer.SaveDone), waited for on an interrupt
	handled chan struct{}            // made when an interrupt begins, closed if its exit returns (tests)
	code    int                      // the interrupt's exit status
}

// beginInterrupt records that an interrupt ending with status code is
// being handled.
func (p *trainProgress) beginInterrupt(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handled == nil {
		p.handled, p.code = make(chan struct{}), code
	}
}

// endInterrupt says the interrupt's exit returned (only a test's does).
func (p *trainProgress) endInterrupt() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.handled)
}

// awaitInterrupt, when an interrupt is being handled, waits up to max for
// it to end the process and returns its exit status and true; false when
// there is none. The
// ranks train on during the interrupt's flushes and may fail because of
// them (a Save finding the NVMe swap files the interrupt removed): that
// failure must not exit first, with status 1 and without the interrupted
// line.
func (p *trainProgress) awaitInterrupt(max time.Duration) (int, bool) {
	p.mu.Lock()
	ch, code := p.handled, p.code
	p.mu.Unlock()
	if ch == nil {
		return 0, false
	}
	select {
	case <-ch:
	case <-time.After(max):
	}
	return code, true
}

// interruptFlushTimeout bounds the flushes on an interrupt: deepgo launch
// kills what SIGTERM has not ended after --grace (default 5 s).
const interruptFlushTimeout = 3 * time.Second

// atInterrupt registers f to run on an interrupt, before the process
// exits, with the last step finished: a monitor flushing its files.
func (p *trainProgress) atInterrupt(f func(step int) error) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.flush = append(p.flush, f)
	p.mu.Unlock()
}

// atInterruptWait registers done, a rank's Trainer.SaveDone: on an
// interrupt the background save it reports in flight is waited for before
// the process exits, so that the checkpoint being written is committed.
func (p *trainProgress) atInterruptWait(done func() <-chan struct{}) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.saves = append(p.saves, done)
	p.mu.Unlock()
}

// waitSaves waits for the background saves in flight (atInterruptWait),
// first saying so on stderr when say. A signal on sig stops the wait: it
// returns false then.
func (p *trainProgress) waitSaves(sig <-chan os.Signal, say bool, stderr io.Writer) bool {
	if p == nil {
		return true
	}
	p.mu.Lock()
	saves := append([]func() <-chan struct{}(nil), p.saves...)
	p.mu.Unlock()
	var open []<-chan struct{}
	for _, f := range saves {
		done := f()
		select {
		case <-done:
		default:
			open = append(open, done)
		}
	}
	if len(open) == 0 {
		return true
	}
	if say {
		fmt.Fprintln(stderr, "deepgo train: waiting for the checkpoint being written in the background (checkpoint.writer.decoupled); interrupt again to exit now and lose it")
	}
	for _, done := range open {
		select {
		case <-done:
		case _, ok := <-sig:
			if ok {
				return false
			}
			sig = nil // closed: the run ended; wait on
			<-done
		}
	}
	return true
}

// flushAll runs the atInterrupt functions with step, giving up after
// timeout (a writer stuck on a full disk must not keep the process alive).
func (p *trainProgress) flushAll(step int, timeout time.Duration) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	fs := append([]func(int) error(nil), p.flush...)
	p.mu.Unlock()
	if len(fs) == 0 {
		return nil
	}
	done := make(chan error, 1)
	go func() {
		var errs []error
		for _, f := range fs {
			errs = append(errs, f(step))
		}
		done <- errors.Join(errs...)
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("flushing the monitor files: %w", err)
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("the monitor files were not flushed within %v: their last steps may be missing", timeout)
	}
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
// latest file names, by this run or an earlier one), or none; before the
// first step (of a run that did not resume) it says so.
func (p *trainProgress) interruptedLine() string {
	line, _ := p.interrupted()
	return line
}

// interrupted is interruptedLine and the step it names.
func (p *trainProgress) interrupted() (string, int) {
	p.mu.Lock()
	step, dir := p.step, p.saveDir
	p.mu.Unlock()
	last := "none"
	if dir != "" {
		if tag, err := checkpoint.ReadLatest(nil, dir); err == nil {
			last = filepath.Join(dir, tag)
		}
	}
	if step == 0 { // nothing trained yet: a failed start-up (mpirun stopping the job) lands here too
		return fmt.Sprintf("deepgo train: interrupted before step 1 finished (last checkpoint: %s)", last), step
	}
	return fmt.Sprintf("deepgo train: interrupted at step %d (last checkpoint: %s)", step, last), step
}

// interruptSignals are the signals that stop deepgo train with its
// interrupted line: SIGINT (Ctrl-C) and SIGTERM (deepgo launch stopping its
// processes, a job scheduler, kill).
var interruptSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}

// watchInterrupt waits for a signal on sig, then waits for the
// background saves in flight (checkpoint.writer.decoupled; a second
// signal stops that wait), runs p's atInterrupt functions (flushing the
// monitor files through the step the line names, within
// interruptFlushTimeout), (when say) writes p's interrupted line to
// stderr and calls exit(128+N), the status a shell gives a process killed
// by signal N of the first signal: 130 for SIGINT, 143 for SIGTERM. It
// returns when sig is closed without a signal.
func watchInterrupt(sig <-chan os.Signal, p *trainProgress, say bool, stderr io.Writer, exit func(int)) {
	s, ok := <-sig
	if !ok {
		return
	}
	code := 130
	if n, ok := s.(syscall.Signal); ok {
		code = 128 + int(n)
	}
	p.beginInterrupt(code)
	// the checkpoint being written first: the line names the last one
	// committed
	if !p.waitSaves(sig, say, stderr) && say {
		fmt.Fprintln(stderr, "deepgo train: interrupted again: the checkpoint being written in the background is lost (the previous one stays the latest)")
	}
	// the step first: every step up to it is in the monitor's queue, and
	// the flush writes at least those while the ranks train on
	line, step := p.interrupted()
	if err := p.flushAll(step, interruptFlushTimeout); err != nil {
		fmt.Fprintln(stderr, "deepgo train:", err)
	}
	if say {
		fmt.Fprintln(stderr, line)
	}
	exit(code)
	p.endInterrupt()
}
