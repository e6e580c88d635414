package offload

// This file carries swap I/O across the boundary between two optimizer
// steps, so that it runs behind the next step's forward and backward
// instead of inside the optimizer step: with pipeline_write the writes a
// step leaves in flight at its end are not waited for there, and with
// pipeline_read the reads the next step's plan issues before it first
// waits for a write (the first buffer_count sub-groups, into the buffers
// the plan reads them into) are issued as soon as the write leaving each
// buffer has finished, by a goroutine, while the engine computes.
//
// Whatever touches the swap state next (the next step's first Acquire, an
// Acquire out of order, ReadState, Close) joins that goroutine first; a
// read is never issued into a buffer or from a file a carried write still
// uses (run waits for such writes), so the plans stay as they are.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deepgo-ml/deepgo/aio"
)

// carried is the prefetch in flight between two steps.
type carried struct {
	done  chan struct{}
	reads map[int]*aio.Request // issued prefetch reads, by group
	err   error                // of a carried write, or of issuing a read
}

// endStep ends a planned step: After[n-1] without its waits for writes
// when pipeline_write is on (else as planned), then, with pipeline_read,
// the next step's leading reads start behind the carried writes.
func (s *NVMeStore) endStep(after []Action) error {
	if !s.popt.PipelineWrite {
		return s.run(after)
	}
	var issue []Action
	for _, a := range after {
		if a.Kind != WaitWrite {
			issue = append(issue, a)
		}
	}
	if err := s.run(issue); err != nil {
		return err
	}
	if s.popt.PipelineRead {
		s.prefetch()
	}
	return nil
}

// leadingReads are the plan's reads issued before its first wait for a
// write: the groups whose state the next step reads first, each into a
// buffer free at the step's start.
func (p *Plan) leadingReads() []Action {
	var out []Action
	for i := range p.Before {
		for _, a := range append(append([]Action(nil), p.Before[i]...), p.After[i]...) {
			switch a.Kind {
			case WaitWrite:
				return out
			case IssueRead:
				out = append(out, a)
			}
		}
	}
	return out
}

// prefetch starts the goroutine issuing the next step's leading reads,
// each once the carried writes on its buffer and its file have finished.
// Those writes move from s.writes to the goroutine, which reports their
// errors.
func (s *NVMeStore) prefetch() {
	type job struct {
		a     Action
		g     *swapGroup
		after []*aio.Request
	}
	var jobs []job
	for _, a := range s.plan.leadingReads() {
		g := s.order[a.Group]
		if !g.written {
			continue // reads as zeros: run clears the buffer
		}
		if _, err := s.buffer(a.Buffer); err != nil {
			continue // the step's own read allocates it and reports the error
		}
		j := job{a: a, g: g}
		for grp, r := range s.writes {
			if s.wbuf[grp] == a.Buffer || grp == a.Group {
				j.after = append(j.after, r)
			}
		}
		jobs = append(jobs, j)
	}
	c := &carried{done: make(chan struct{}), reads: map[int]*aio.Request{}}
	// the carried writes no job waits for are the goroutine's too, so that
	// join reports every error and leaves nothing in flight unseen
	rest := make([]*aio.Request, 0, len(s.writes))
	for grp, r := range s.writes {
		rest = append(rest, r)
		delete(s.writes, grp)
		delete(s.wbuf, grp)
	}
	bufs := s.bufs
	s.carry, s.prefetched = c, true
	go func() {
		defer close(c.done)
		var errs []error
		for _, j := range jobs {
			failed := false
			for _, w := range j.after {
				if err := w.Wait(context.Background()); err != nil {
					failed = true
				}
			}
			if failed {
				continue // reported below with the rest of the writes
			}
			if err := j.g.present(); err != nil {
				errs = append(errs, err)
				continue
			}
			r, err := j.g.file.ReadAt(bufs[j.a.Buffer], j.g.bytes(), 0)
			if err != nil {
				errs = append(errs, fmt.Errorf("offload: sub-group %q: %w", j.g.name, err))
				continue
			}
			c.reads[j.a.Group] = r
		}
		for _, w := range rest {
			if err := w.Wait(context.Background()); err != nil {
				errs = append(errs, fmt.Errorf("offload: a write carried past the step: %w", err))
			}
		}
		c.err = errors.Join(errs...)
	}()
}

// join waits for the carried I/O to be issued (its writes finished) and
// takes the prefetch reads into s.reads; an error of a carried write is
// returned, and the reads are then drained too.
func (s *NVMeStore) join() error {
	c := s.carry
	if c == nil {
		return nil
	}
	s.carry = nil
	t0 := time.Now()
	<-c.done
	s.waited += time.Since(t0)
	for g, r := range c.reads {
		s.reads[g] = r
	}
	return c.err
}

// waitCarried waits for the writes that still use buffer b or group g's
// file, before a read into b from g's file.
func (s *NVMeStore) waitCarried(g, b int) error {
	var errs []error
	for grp := range s.writes {
		if grp == g || s.wbuf[grp] == b {
			if err := s.wait(s.writes, grp); err != nil {
				errs = append(errs, fmt.Errorf("offload: sub-group %q: %w", s.order[grp].name, err))
			}
		}
	}
	return errors.Join(errs...)
}
