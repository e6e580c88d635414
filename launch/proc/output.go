package proc

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// syncWriter serializes whole lines from many processes onto one writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) line(prefix string, b []byte) {
	if s.w == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "%s%s\n", prefix, b)
}

// lineWriter prefixes each line a process writes with its name and keeps
// the last keep lines.
type lineWriter struct {
	prefix string
	out    *syncWriter
	keep   int

	mu   sync.Mutex
	part []byte
	last []string // a ring of the last lines, oldest at next once full
	next int
}

func newLineWriter(name string, out *syncWriter, keep int) *lineWriter {
	return &lineWriter{prefix: "[" + name + "] ", out: out, keep: keep}
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, b...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		l.emit(l.part[:i])
		l.part = l.part[i+1:]
	}
	return len(b), nil
}

func (l *lineWriter) emit(line []byte) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	l.out.line(l.prefix, line)
	if l.keep == 0 {
		return
	}
	if len(l.last) < l.keep {
		l.last = append(l.last, string(line))
		return
	}
	l.last[l.next] = string(line)
	l.next = (l.next + 1) % l.keep
}

// flush writes a last line that had no newline.
func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.part) > 0 {
		l.emit(l.part)
		l.part = nil
	}
}

// tail returns the kept lines, oldest first.
func (l *lineWriter) tail() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append(append([]string(nil), l.last[l.next:]...), l.last[:l.next]...)
}
