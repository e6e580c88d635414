package monitor

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CSVWriter writes DeepSpeed's csv_monitor layout: in dir, one file per
// tag named after it ('/' and ' ' become '_', plus ".csv"), opened for
// appending, with the header row "step,<last part of the tag>" written the
// first time this process writes the file, then one "step,value" row per
// event (step: the event's x value, Event.Step), in Python csv's dialect
// (CRLF line ends).
type CSVWriter struct {
	dir       string
	files     map[string]*csvFile
	lastFlush time.Time
}

// FlushInterval is how often the writers hand buffered rows to the file
// system: a reader sees a running job's steps within a second, and a step
// does not pay a write per file (Close flushes the rest).
const FlushInterval = time.Second

type csvFile struct {
	f *os.File
	b *bufio.Writer
	w *csv.Writer
}

// NewCSVWriter creates dir (and its parents) and writes there.
func NewCSVWriter(dir string) (*CSVWriter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("monitor: csv_monitor directory: %w", err)
	}
	return &CSVWriter{dir: dir, files: map[string]*csvFile{}}, nil
}

// CSVFileName is the file DeepSpeed's csv monitor writes a tag to.
func CSVFileName(tag string) string {
	return strings.NewReplacer("/", "_", " ", "_").Replace(tag) + ".csv"
}

// WriteEvents appends one row per event at its Step (the optimizer step
// is not written), flushing at most every FlushInterval.
func (c *CSVWriter) WriteEvents(_ int, events []Event) error {
	for _, e := range events {
		cf, err := c.file(e.Tag)
		if err != nil {
			return err
		}
		if err := cf.w.Write([]string{strconv.FormatInt(e.Step, 10), e.text()}); err != nil {
			return err
		}
	}
	if time.Since(c.lastFlush) < FlushInterval {
		return nil
	}
	return c.Flush()
}

// Flush hands every buffered row to the file system.
func (c *CSVWriter) Flush() error {
	c.lastFlush = time.Now()
	var errs []error
	for _, cf := range c.files {
		cf.w.Flush()
		errs = append(errs, cf.w.Error(), cf.b.Flush())
	}
	return errors.Join(errs...)
}

func (c *CSVWriter) file(tag string) (*csvFile, error) {
	if cf, ok := c.files[tag]; ok {
		return cf, nil
	}
	f, err := os.OpenFile(filepath.Join(c.dir, CSVFileName(tag)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("monitor: csv_monitor: %w", err)
	}
	b := bufio.NewWriter(f)
	w := csv.NewWriter(b)
	w.UseCRLF = true
	header := tag[strings.LastIndex(tag, "/")+1:]
	if err := w.Write([]string{"step", header}); err != nil {
		f.Close()
		return nil, err
	}
	cf := &csvFile{f: f, b: b, w: w}
	c.files[tag] = cf
	return cf, nil
}

// Close flushes and closes every file.
func (c *CSVWriter) Close() error {
	var errs []error
	for _, cf := range c.files {
		cf.w.Flush()
		errs = append(errs, cf.w.Error(), cf.b.Flush(), cf.f.Close())
	}
	c.files = map[string]*csvFile{}
	return errors.Join(errs...)
}
