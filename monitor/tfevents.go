package monitor

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/deepgo-ml/deepgo/rundir"
	"google.golang.org/protobuf/encoding/protowire"
)

// TensorboardWriter writes a tensorboard event file in dir: TFRecord
// framing around tensorflow.Event protos, a file_version event first and
// then Events holding Summaries of simple_value scalars at each event's x
// value, the records torch's SummaryWriter.add_scalar produces for
// DeepSpeed.
type TensorboardWriter struct {
	f         *os.File
	b         *bufio.Writer
	path      string
	now       func() time.Time
	lastFlush time.Time
}

// NewTensorboardWriter creates dir and a new event file in it named as
// torch's SummaryWriter names them (events.out.tfevents.<secs>.<host>.<pid>.<n>).
func NewTensorboardWriter(dir string) (*TensorboardWriter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("monitor: tensorboard directory: %w", err)
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	now := time.Now()
	var f *os.File
	var err error
	for n := 0; ; n++ { // two writers in one second and process get distinct files
		name := fmt.Sprintf("events.out.tfevents.%010d.%s.%d.%d", now.Unix(), host, os.Getpid(), n)
		f, err = os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if !errors.Is(err, os.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("monitor: tensorboard event file: %w", err)
	}
	w := &TensorboardWriter{f: f, b: bufio.NewWriter(f), path: f.Name(), now: time.Now}
	ev := protowire.AppendTag(nil, 1, protowire.Fixed64Type)
	ev = protowire.AppendFixed64(ev, math.Float64bits(wallTime(now)))
	ev = protowire.AppendTag(ev, 3, protowire.BytesType)
	ev = protowire.AppendString(ev, "brain.Event:2")
	if err := w.record(ev); err != nil {
		f.Close()
		return nil, err
	}
	return w, w.b.Flush()
}

// Path is the event file's path.
func (w *TensorboardWriter) Path() string { return w.path }

func wallTime(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// WriteEvents writes the step's events as tensorflow.Event records
// (wall_time, step, summary of simple_value scalars), one per run of
// consecutive events at the same x value (Event.Step: train_loss goes a
// batch of samples before the other Train/Samples tags, as in DeepSpeed),
// flushing at most every FlushInterval.
func (w *TensorboardWriter) WriteEvents(_ int, events []Event) error {
	for len(events) > 0 {
		n := 1
		for n < len(events) && events[n].Step == events[0].Step {
			n++
		}
		if err := w.writeEvent(events[0].Step, events[:n]); err != nil {
			return err
		}
		events = events[n:]
	}
	if time.Since(w.lastFlush) < FlushInterval {
		return nil
	}
	return w.Flush()
}

// writeEvent writes one Event holding events as simple_values at step.
func (w *TensorboardWriter) writeEvent(step int64, events []Event) error {
	var sum []byte
	for _, e := range events {
		var v []byte
		v = protowire.AppendTag(v, 1, protowire.BytesType)
		v = protowire.AppendString(v, e.Tag)
		v = protowire.AppendTag(v, 2, protowire.Fixed32Type)
		v = protowire.AppendFixed32(v, math.Float32bits(float32(e.Value)))
		sum = protowire.AppendTag(sum, 1, protowire.BytesType) // Summary.value
		sum = protowire.AppendBytes(sum, v)
	}
	ev := protowire.AppendTag(nil, 1, protowire.Fixed64Type) // Event.wall_time
	ev = protowire.AppendFixed64(ev, math.Float64bits(wallTime(w.now())))
	ev = protowire.AppendTag(ev, 2, protowire.VarintType) // Event.step
	ev = protowire.AppendVarint(ev, uint64(step))
	ev = protowire.AppendTag(ev, 5, protowire.BytesType) // Event.summary
	ev = protowire.AppendBytes(ev, sum)
	return w.record(ev)
}

// Flush hands the buffered records to the file system.
func (w *TensorboardWriter) Flush() error {
	w.lastFlush = time.Now()
	if err := w.b.Flush(); err != nil {
		return fmt.Errorf("monitor: tensorboard: %w", err)
	}
	return nil
}

// record frames data as one TFRecord: length (uint64 LE), its masked CRC,
// the data, the data's masked CRC.
func (w *TensorboardWriter) record(data []byte) error {
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], rundir.MaskedCRC(hdr[:8]))
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], rundir.MaskedCRC(data))
	for _, p := range [][]byte{hdr[:], data, tail[:]} {
		if _, err := w.b.Write(p); err != nil {
			return fmt.Errorf("monitor: tensorboard: %w", err)
		}
	}
	return nil
}

// Close flushes and closes the event file.
func (w *TensorboardWriter) Close() error {
	return errors.Join(w.b.Flush(), w.f.Close())
}
