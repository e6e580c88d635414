package monitor

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
)

// tbEvent is a decoded tensorflow.Event: the file_version or the scalars.
type tbEvent struct {
	wall    float64
	step    int64
	version string
	scalars map[string]float32
}

// readEvents reads a TFRecord file, checking both masked CRCs of every
// record, and decodes the Events.
func readEvents(t *testing.T, path string) []tbEvent {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []tbEvent
	for len(b) > 0 {
		require.GreaterOrEqual(t, len(b), 12, "truncated header")
		n := binary.LittleEndian.Uint64(b[:8])
		require.Equal(t, rundir.MaskedCRC(b[:8]), binary.LittleEndian.Uint32(b[8:12]), "length crc")
		data := b[12 : 12+n]
		require.Equal(t, rundir.MaskedCRC(data), binary.LittleEndian.Uint32(b[12+n:16+n]), "data crc")
		b = b[16+n:]
		out = append(out, decodeEvent(t, data))
	}
	return out
}

func decodeEvent(t *testing.T, b []byte) tbEvent {
	ev := tbEvent{scalars: map[string]float32{}}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		require.Positive(t, n)
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			ev.wall, b = math.Float64frombits(v), b[n:]
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			ev.step, b = int64(v), b[n:]
		case num == 3 && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			ev.version, b = v, b[n:]
		case num == 5 && typ == protowire.BytesType:
			sum, n := protowire.ConsumeBytes(b)
			b = b[n:]
			for len(sum) > 0 {
				_, _, n := protowire.ConsumeTag(sum)
				val, m := protowire.ConsumeBytes(sum[n:])
				sum = sum[n+m:]
				var tag string
				var x float32
				for len(val) > 0 {
					f, _, n := protowire.ConsumeTag(val)
					val = val[n:]
					if f == 1 {
						s, n := protowire.ConsumeString(val)
						tag, val = s, val[n:]
					} else {
						v, n := protowire.ConsumeFixed32(val)
						x, val = math.Float32frombits(v), val[n:]
					}
				}
				ev.scalars[tag] = x
			}
		default:
			t.Fatalf("unexpected field %d type %d", num, typ)
		}
	}
	return ev
}

// TestTensorboardRecords: a version record, then one Event per step with
// every tag as a simple_value; the CRCs check out.
func TestTensorboardRecords(t *testing.T) {
	dir := t.TempDir()
	w, err := NewTensorboardWriter(dir)
	require.NoError(t, err)
	for s := 1; s <= 3; s++ {
		require.NoError(t, w.WriteEvents(s, []Event{{Tag: TagLoss, Value: 3 - 0.5*float64(s), Step: int64(s)}, {Tag: TagLR, Value: 1e-3, Step: int64(s)}}))
	}
	require.NoError(t, w.Close())
	assert.True(t, strings.HasPrefix(filepath.Base(w.Path()), "events.out.tfevents."), w.Path())
	evs := readEvents(t, w.Path())
	require.Len(t, evs, 4)
	assert.Equal(t, "brain.Event:2", evs[0].version)
	for i, ev := range evs[1:] {
		assert.Equal(t, int64(i+1), ev.step)
		assert.Equal(t, float32(3-0.5*float64(i+1)), ev.scalars[TagLoss])
		assert.Equal(t, float32(1e-3), ev.scalars[TagLR])
		assert.Greater(t, ev.wall, 1e9)
	}
}

// tensorboardTags reads dir with Python tensorboard's EventAccumulator and
// returns each scalar tag's steps, or skips when tensorboard is not installed.
func tensorboardTags(t *testing.T, dir string) map[string][]int {
	t.Helper()
	if err := exec.Command("python3", "-c", "import tensorboard").Run(); err != nil {
		t.Skip("python3 with the tensorboard package not available (pip install tensorboard): ", err)
	}
	script := `import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
print(json.dumps({tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}))`
	out, err := exec.Command("python3", "-c", script, dir).Output()
	require.NoError(t, err, "EventAccumulator: %s", errText(err))
	var tags map[string][]int
	require.NoError(t, json.Unmarshal(out, &tags), string(out))
	return tags
}

func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return fmt.Sprint(err)
}

// TestTensorboardPython: tensorboard's own reader finds the tags and steps.
func TestTensorboardPython(t *testing.T) {
	dir := t.TempDir()
	w, err := NewTensorboardWriter(dir)
	require.NoError(t, err)
	for s := 1; s <= 5; s++ {
		require.NoError(t, w.WriteEvents(s, []Event{{Tag: TagLoss, Value: 1 / float64(s), Step: int64(s)}, {Tag: TagRSS, Value: 1 << 20, Int: true, Step: int64(s)}}))
	}
	require.NoError(t, w.Close())
	tags := tensorboardTags(t, dir)
	assert.Equal(t, map[string][]int{TagLoss: {1, 2, 3, 4, 5}, TagRSS: {1, 2, 3, 4, 5}}, tags)
}
