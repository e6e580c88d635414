// Package proc runs one node's processes of a job planned by package
// launch: each in its own process group, killed with the launcher
// (Pdeathsig), its output prefixed with its rank and the last lines of its
// stderr kept, and the whole job stopped (SIGTERM, then SIGKILL after a
// grace period) as soon as one process fails or the launcher is told to
// stop. Linux only, like the rest of deepgo.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Spec is one process to start.
type Spec struct {
	Rank int
	// Name labels its output lines and its failure ("" : "rank N").
	Name string
	Argv []string
	Env  []string // its whole environment, "KEY=value"
}

// Options tune Run.
type Options struct {
	// Grace is how long a process has between SIGTERM and SIGKILL (0: 5 s).
	Grace time.Duration
	// Stdout and Stderr receive the processes' lines, each prefixed
	// "[rank N] " (nil: discarded).
	Stdout, Stderr io.Writer
	// TailLines is how many of its last stderr lines a failure keeps (0: 20).
	TailLines int
	// Started, when set, is called with each process's pid once it runs.
	Started func(rank, pid int)
}

// Failure is the error of a job stopped because one of its processes
// failed: the first one seen to fail.
type Failure struct {
	Rank, Pid int
	Name      string // the Spec's
	// Code is the exit status, -1 when a signal ended the process.
	Code   int
	Signal syscall.Signal
	// Tail holds the last lines the process wrote to stderr.
	Tail []string
}

// Error names the rank, how it ended and its last stderr lines.
func (f *Failure) Error() string {
	how := fmt.Sprintf("exited with code %d", f.Code)
	if f.Code < 0 {
		how = fmt.Sprintf("was killed by signal %d (%v)", int(f.Signal), f.Signal)
	}
	msg := fmt.Sprintf("%s (pid %d) %s", f.Name, f.Pid, how)
	if len(f.Tail) == 0 {
		return msg + "; it wrote nothing to stderr"
	}
	return fmt.Sprintf("%s; its last %d stderr lines:\n    %s", msg, len(f.Tail), strings.Join(f.Tail, "\n    "))
}

// Stopped is the error of a job stopped because its context ended (the
// launcher got SIGINT or SIGTERM); it wraps the context's error.
type Stopped struct{ Err error }

func (s *Stopped) Error() string { return fmt.Sprintf("stopped every process: %v", s.Err) }
func (s *Stopped) Unwrap() error { return s.Err }

type child struct {
	spec Spec
	cmd  *exec.Cmd
	out  *lineWriter
	errw *lineWriter
}

type exit struct {
	c   *child
	err error
}

// Run starts procs and waits for them. It returns nil when every process
// exits 0. When one exits otherwise, it stops the others and returns a
// *Failure naming it; when ctx ends, it stops them all and returns a
// *Stopped (wrapping the context's cause: signal.NotifyContext names the
// signal). No process of the job (nor of its process groups) is left
// running when Run returns, and a launcher that is killed takes its
// processes along (Pdeathsig).
func Run(ctx context.Context, procs []Spec, o Options) error {
	if o.Grace <= 0 {
		o.Grace = 5 * time.Second
	}
	if o.TailLines <= 0 {
		o.TailLines = 20
	}
	// Pdeathsig fires when the thread that forked the child exits, not the
	// process: keep this goroutine on one thread until every child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stdout, stderr := &syncWriter{w: o.Stdout}, &syncWriter{w: o.Stderr}
	exits := make(chan exit, len(procs))
	var running []*child
	var failed error
	for _, s := range procs {
		c, err := start(s, stdout, stderr, o)
		if err != nil {
			failed = fmt.Errorf("rank %d: start %q: %w", s.Rank, s.Argv, err)
			break
		}
		if o.Started != nil {
			o.Started(s.Rank, c.cmd.Process.Pid)
		}
		running = append(running, c)
		go func() { exits <- exit{c, c.wait()} }()
	}
	left := len(running)
	var stopping <-chan time.Time
	stop := func() {
		for _, c := range running {
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		}
		stopping = time.After(o.Grace)
	}
	if failed != nil {
		stop()
	}
	done := ctx.Done()
	for left > 0 {
		select {
		case e := <-exits:
			left--
			if e.err != nil && failed == nil {
				failed = failure(e.c, e.err)
				stop()
			}
		case <-done:
			done = nil
			if failed == nil {
				failed = &Stopped{Err: context.Cause(ctx)}
				stop()
			}
		case <-stopping:
			stopping = nil
			for _, c := range running {
				_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			}
		}
	}
	// What a process left behind in its group goes with it.
	for _, c := range running {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	}
	return failed
}

func start(s Spec, stdout, stderr *syncWriter, o Options) (*child, error) {
	if len(s.Argv) == 0 {
		return nil, errors.New("empty command")
	}
	if s.Name == "" {
		s.Name = fmt.Sprintf("rank %d", s.Rank)
	}
	c := &child{spec: s, out: newLineWriter(s.Name, stdout, 0), errw: newLineWriter(s.Name, stderr, o.TailLines)}
	c.cmd = exec.Command(s.Argv[0], s.Argv[1:]...)
	c.cmd.Env = s.Env
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.errw
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A grandchild holding the pipes open must not keep Wait from returning.
	c.cmd.WaitDelay = o.Grace
	return c, c.cmd.Start()
}

func (c *child) wait() error {
	err := c.cmd.Wait()
	c.out.flush()
	c.errw.flush()
	return err
}

func failure(c *child, err error) *Failure {
	f := &Failure{Rank: c.spec.Rank, Name: c.spec.Name, Pid: c.cmd.Process.Pid, Code: -1, Tail: c.errw.tail()}
	ps := c.cmd.ProcessState
	if ps == nil {
		f.Tail = append(f.Tail, fmt.Sprintf("(launcher: %v)", err))
		return f
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		f.Signal = ws.Signal()
	case ps.ExitCode() >= 0:
		f.Code = ps.ExitCode()
		if f.Code == 0 { // exited 0, but the output could not be copied (WaitDelay)
			f.Code = -1
			f.Tail = append(f.Tail, fmt.Sprintf("(launcher: %v)", err))
		}
	}
	return f
}
