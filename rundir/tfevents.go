package rundir

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// EventFilePrefix starts the name of a tensorboard event file
// (events.out.tfevents.<secs>.<host>.<pid>...), as torch's SummaryWriter,
// which DeepSpeed's tensorboard monitor uses, and deepgo's monitor name them.
const EventFilePrefix = "events.out.tfevents."

// ReadEvents reads the scalars of the tensorboard event files in dir, by
// tag, in file-name order (a resumed run starts a new file, named by its
// start time): each event's step as written, the simple_value (or a scalar
// tensor's value, torch's new-style summaries) as float64. Like ReadSeries,
// a step at or below one already read starts over from there. A truncated
// last record (a process killed while writing) ends its file, as
// TensorBoard reads it; a record whose CRC does not match is an error
// naming the file and offset. No event file: an empty map.
func ReadEvents(dir string) (map[string]*Series, error) {
	paths, err := filepath.Glob(filepath.Join(dir, EventFilePrefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("rundir: %w", err)
	}
	sort.Strings(paths)
	out := map[string]*Series{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("rundir: %w", err)
		}
		if err := readRecords(b, out); err != nil {
			return nil, fmt.Errorf("rundir: %s: %w", p, err)
		}
	}
	return out, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's masked CRC32C of b: rotated right by 15 bits
// plus a constant, so that a CRC over data holding CRCs stays well
// distributed. The tensorboard writer (package monitor) frames its records
// with it.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// readRecords walks TFRecord framing (length uint64 LE, its masked CRC,
// data, the data's masked CRC) and adds each Event's scalars to out.
func readRecords(b []byte, out map[string]*Series) error {
	for off := 0; len(b) > 0; {
		if len(b) < 12 {
			return nil // truncated header: the writer was stopped
		}
		n := binary.LittleEndian.Uint64(b[:8])
		if binary.LittleEndian.Uint32(b[8:12]) != MaskedCRC(b[:8]) {
			return fmt.Errorf("record at byte %d: length CRC mismatch (not a TFRecord event file, or damaged)", off)
		}
		if n > uint64(len(b)-12) || uint64(len(b)-12)-n < 4 {
			return nil // truncated record
		}
		data := b[12 : 12+n]
		if binary.LittleEndian.Uint32(b[12+n:16+n]) != MaskedCRC(data) {
			return fmt.Errorf("record at byte %d: data CRC mismatch (damaged)", off)
		}
		if err := addEvent(data, out); err != nil {
			return fmt.Errorf("record at byte %d: %w", off, err)
		}
		off += 16 + int(n)
		b = b[16+n:]
	}
	return nil
}

// fields calls f for each field of the protobuf message b.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var u uint32
			u, n = protowire.ConsumeFixed32(b)
			x = uint64(u)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// addEvent decodes a tensorflow.Event (step 2, summary 5) and adds its
// scalar values (Summary.value 1: tag 1, simple_value 2, tensor 8).
func addEvent(b []byte, out map[string]*Series) error {
	var step int64
	var summary []byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 2 && typ == protowire.VarintType:
			step = int64(x)
		case num == 5 && typ == protowire.BytesType:
			summary = v
		}
		return nil
	})
	if err != nil || summary == nil {
		return err
	}
	return fields(summary, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		tag, val, ok, err := scalarValue(v)
		if err != nil || !ok {
			return err
		}
		s := out[tag]
		if s == nil {
			s = &Series{Tag: tag}
			out[tag] = s
		}
		s.add(step, val)
		return nil
	})
}

// scalarValue decodes a Summary.Value: its tag and, when it is a scalar,
// the value (simple_value, or a one-element float or double tensor).
func scalarValue(b []byte) (tag string, val float64, ok bool, err error) {
	err = fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			tag = string(v)
		case num == 2 && typ == protowire.Fixed32Type:
			val, ok = float64(math.Float32frombits(uint32(x))), true
		case num == 8 && typ == protowire.BytesType:
			val, ok = tensorScalar(v)
		}
		return nil
	})
	return strings.TrimSpace(tag), val, ok && tag != "", err
}

// tensorScalar reads a TensorProto holding one float (float_val 5) or
// double (double_val 6), packed or not, or the same in tensor_content (4)
// with dtype (1) DT_FLOAT or DT_DOUBLE.
func tensorScalar(b []byte) (float64, bool) {
	var vals []float64
	var dtype uint64
	var content []byte
	_ = fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			dtype = x
		case num == 4 && typ == protowire.BytesType:
			content = v
		case num == 5 && typ == protowire.Fixed32Type:
			vals = append(vals, float64(math.Float32frombits(uint32(x))))
		case num == 5 && typ == protowire.BytesType:
			for ; len(v) >= 4; v = v[4:] {
				vals = append(vals, float64(math.Float32frombits(binary.LittleEndian.Uint32(v))))
			}
		case num == 6 && typ == protowire.Fixed64Type:
			vals = append(vals, math.Float64frombits(x))
		case num == 6 && typ == protowire.BytesType:
			for ; len(v) >= 8; v = v[8:] {
				vals = append(vals, math.Float64frombits(binary.LittleEndian.Uint64(v)))
			}
		}
		return nil
	})
	const dtFloat, dtDouble = 1, 2
	switch {
	case len(vals) == 1:
		return vals[0], true
	case dtype == dtFloat && len(content) == 4:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(content))), true
	case dtype == dtDouble && len(content) == 8:
		return math.Float64frombits(binary.LittleEndian.Uint64(content)), true
	}
	return 0, false
}
