package tensor

import (
	"fmt"
	"strings"
)

// DType is an element type. Names and sizes follow torch; the values equal
// the C core's dg_dtype so they cross cgo unchanged.
type DType uint8

// Element types.
const (
	Float32 DType = iota
	Float16
	BFloat16
	Int32
	Int64
	Uint8
	Bool
	Float64
)

var dtypeInfo = [...]struct {
	name string
	size int
}{
	Float32:  {"float32", 4},
	Float16:  {"float16", 2},
	BFloat16: {"bfloat16", 2},
	Int32:    {"int32", 4},
	Int64:    {"int64", 8},
	Uint8:    {"uint8", 1},
	Bool:     {"bool", 1},
	Float64:  {"float64", 8},
}

// Valid reports whether d is one of the defined dtypes.
func (d DType) Valid() bool { return int(d) < len(dtypeInfo) }

// Size is the element size in bytes (0 for an invalid dtype).
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeInfo[d].size
}

// String is torch's name for the dtype, e.g. "bfloat16".
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == Float32 || d == Float16 || d == BFloat16 || d == Float64 }

// IsHalf reports whether d is a 16-bit float type.
func (d DType) IsHalf() bool { return d == Float16 || d == BFloat16 }

// MarshalText writes the dtype's torch name ("bfloat16"), so JSON and
// other text encodings of a struct holding one (zero.Memory, a comm call
// record) say what it is rather than a number. An invalid dtype writes
// "dtype(N)", as String does, so a report never fails on one; reading it
// back is an error.
func (d DType) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads any spelling ParseDType accepts.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// ParseDType accepts torch names and the spellings DeepSpeed configs use
// ("fp16", "bf16", "fp32", "half", "bfloat16", "torch.float16", ...).
func ParseDType(s string) (DType, error) {
	k := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "torch.")
	switch k {
	case "float32", "fp32", "float", "f32":
		return Float32, nil
	case "float16", "fp16", "half", "f16":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "int32", "int", "i32":
		return Int32, nil
	case "int64", "long", "i64":
		return Int64, nil
	case "uint8", "u8", "byte":
		return Uint8, nil
	case "bool":
		return Bool, nil
	case "float64", "fp64", "double", "f64":
		return Float64, nil
	}
	return 0, fmt.Errorf("unknown dtype %q: allowed float32 (fp32), float16 (fp16, half), bfloat16 (bf16), int32, int64, uint8, bool, float64", s)
}
