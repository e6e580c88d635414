package rundir

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Series is one tag's events in step order.
type Series struct {
	// Tag is the monitor tag, e.g. Train/Samples/train_loss.
	Tag string
	// Steps are strictly increasing: in a Run from Read, the global
	// optimizer steps (1-based; eval_loss's from 0, an evaluation before
	// the first step); from ReadSeries, the file's step column
	// as written (global_samples for a Train/Samples tag, see XAxis).
	Steps []int64
	// Values are the values at Steps.
	Values []float64
}

// Len is the number of events.
func (s *Series) Len() int { return len(s.Steps) }

// Max is the largest finite value and its step; ok is false when there is none.
func (s *Series) Max() (v float64, step int64, ok bool) {
	for i, x := range s.Values {
		if !math.IsNaN(x) && !math.IsInf(x, 0) && (!ok || x > v) {
			v, step, ok = x, s.Steps[i], true
		}
	}
	return v, step, ok
}

// Last is the last value; ok is false for an empty series.
func (s *Series) Last() (v float64, step int64, ok bool) {
	if len(s.Values) == 0 {
		return 0, 0, false
	}
	n := len(s.Values) - 1
	return s.Values[n], s.Steps[n], true
}

// At is the value at step; ok is false when the series has no event there.
func (s *Series) At(step int64) (float64, bool) {
	i := sort.Search(len(s.Steps), func(i int) bool { return s.Steps[i] >= step })
	if i < len(s.Steps) && s.Steps[i] == step {
		return s.Values[i], true
	}
	return 0, false
}

// samplesToSteps turns the x values of a Train/Samples series, written at
// global_samples on axis a, into steps.
func (s *Series) samplesToSteps(a XAxis) error {
	if !IsSamplesTag(s.Tag) {
		return nil
	}
	for i, x := range s.Steps {
		step, err := a.Step(s.Tag, x)
		if err != nil {
			return err
		}
		s.Steps[i] = step
	}
	return nil
}

// ReadSeries reads one csv_monitor file, its step column as written (see
// Series.Steps). Rows repeating the header are
// skipped: csv_monitor appends, and a resumed job writes the header again.
// A step at or below one already read starts over from there (the resumed
// job replays those steps), so the later rows win.
func ReadSeries(path string) (*Series, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rundir: %w", err)
	}
	defer f.Close()
	s, err := parseSeries(f, tagOfFile(filepath.Base(path)))
	if err != nil {
		return nil, fmt.Errorf("rundir: %s: %w", path, err)
	}
	return s, nil
}

// add appends (step, v); a step at or below the last one starts over from
// there (a resumed job replays those steps, and its rows win).
func (s *Series) add(step int64, v float64) {
	if n := len(s.Steps); n > 0 && step <= s.Steps[n-1] {
		keep := sort.Search(n, func(i int) bool { return s.Steps[i] >= step })
		s.Steps, s.Values = s.Steps[:keep], s.Values[:keep]
	}
	s.Steps = append(s.Steps, step)
	s.Values = append(s.Values, v)
}

func parseSeries(r io.Reader, tag string) (*Series, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 2
	s := &Series{Tag: tag}
	header := false
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		if rec[0] == csvStepHeader {
			header = true
			continue
		}
		if !header {
			return nil, fmt.Errorf("line %d: %q before the header row %q", line, rec[0]+","+rec[1], csvStepHeader+","+Header(tag))
		}
		step, err := strconv.ParseInt(rec[0], 10, 64)
		if err != nil || step < 0 {
			return nil, fmt.Errorf("line %d: step %q: want an integer >= 0", line, rec[0])
		}
		v, err := strconv.ParseFloat(rec[1], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: value %q: want a number", line, rec[1])
		}
		s.add(step, v)
	}
	if !header {
		return nil, fmt.Errorf("empty: want the header row %q", csvStepHeader+","+Header(tag))
	}
	return s, nil
}
