package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// This file reproduces DeepSpeed's batch-triad code
// (DeepSpeedConfig._set_batch_related_parameters and _batch_assertion) with
// Python's value semantics, so that deepgo answers exactly as DeepSpeed does
// for every input, including floats, booleans and unresolved "auto" strings.
// Values are nil (absent), int64, float64, bool or string.

// pyError is an exception DeepSpeed would raise.
type pyError struct {
	Type    string // Python exception class
	Phase   string // "derivation" or "assertion"
	Message string
}

func (e *pyError) Error() string { return e.Type + ": " + e.Message }

type pyExc struct{ typ, msg string }

func pyTypeName(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case nil:
		return "NoneType"
	}
	return "object"
}

func pyRepr(v any) string {
	switch x := v.(type) {
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return PyFloatRepr(x)
	case string:
		return x
	case nil:
		return "None"
	}
	return fmt.Sprint(v)
}

// PyFloatRepr formats f as Python's repr(float) does (DeepSpeed's messages
// and csv_monitor files print floats that way).
func PyFloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// num returns v as a number (bool counts as int); isFloat says whether it is a float.
func num(v any) (i int64, f float64, isFloat, ok bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, 1, false, true
		}
		return 0, 0, false, true
	case int64:
		return x, float64(x), false, true
	case float64:
		return 0, x, true, true
	}
	return 0, 0, false, false
}

func pyFloorDiv(a, b any) (any, *pyExc) {
	ai, af, afl, aok := num(a)
	bi, bf, bfl, bok := num(b)
	if !aok || !bok {
		return nil, &pyExc{"TypeError", fmt.Sprintf("unsupported operand type(s) for //: '%s' and '%s'", pyTypeName(a), pyTypeName(b))}
	}
	if afl || bfl {
		if bf == 0 {
			return nil, &pyExc{"ZeroDivisionError", "float floor division by zero"}
		}
		return math.Floor(af / bf), nil
	}
	if bi == 0 {
		return nil, &pyExc{"ZeroDivisionError", "integer division or modulo by zero"}
	}
	q := ai / bi
	if (ai%bi != 0) && ((ai < 0) != (bi < 0)) {
		q--
	}
	return q, nil
}

func pyMul(a, b any) (any, *pyExc) {
	if s, ok := a.(string); ok {
		if n, _, isF, ok := num(b); ok && !isF {
			if n <= 0 {
				return "", nil
			}
			if int64(len(s))*n > 1<<20 {
				return nil, &pyExc{"MemoryError", ""}
			}
			return strings.Repeat(s, int(n)), nil
		}
		return nil, &pyExc{"TypeError", fmt.Sprintf("can't multiply sequence by non-int of type '%s'", pyTypeName(b))}
	}
	if _, ok := b.(string); ok {
		return pyMul(b, a)
	}
	ai, af, afl, aok := num(a)
	bi, bf, bfl, bok := num(b)
	if !aok || !bok {
		return nil, &pyExc{"TypeError", fmt.Sprintf("unsupported operand type(s) for *: '%s' and '%s'", pyTypeName(a), pyTypeName(b))}
	}
	if afl || bfl {
		return af * bf, nil
	}
	return ai * bi, nil
}

// pyGT0 evaluates v > 0.
func pyGT0(v any) (bool, *pyExc) {
	_, f, _, ok := num(v)
	if !ok {
		return false, &pyExc{"TypeError", fmt.Sprintf("'>' not supported between instances of '%s' and 'int'", pyTypeName(v))}
	}
	return f > 0, nil
}

// pyEq evaluates a == b for numbers (and strings).
func pyEq(a, b any) bool {
	_, af, afl, aok := num(a)
	_, bf, bfl, bok := num(b)
	if aok && bok {
		if !afl && !bfl {
			ai, _, _, _ := num(a)
			bi, _, _, _ := num(b)
			return ai == bi
		}
		return af == bf
	}
	as, aS := a.(string)
	bs, bS := b.(string)
	return aS && bS && as == bs
}

// pyBatch runs DeepSpeed's batch logic on (train_batch_size,
// train_micro_batch_size_per_gpu, gradient_accumulation_steps) and the
// data-parallel world size.
func pyBatch(tb, mb, gas any, world int64) (rtb, rmb, rgas any, err *pyError) {
	derive := func(e *pyExc) *pyError { return &pyError{e.typ, "derivation", e.msg} }
	var e *pyExc
	switch {
	case tb != nil && mb != nil && gas != nil:
	case tb != nil && mb != nil:
		if gas, e = pyFloorDiv(tb, mb); e == nil {
			gas, e = pyFloorDiv(gas, world)
		}
	case tb != nil && gas != nil:
		if mb, e = pyFloorDiv(tb, world); e == nil {
			mb, e = pyFloorDiv(mb, gas)
		}
	case mb != nil && gas != nil:
		if tb, e = pyMul(mb, gas); e == nil {
			tb, e = pyMul(tb, world)
		}
	case tb != nil:
		gas = int64(1)
		mb, e = pyFloorDiv(tb, world)
	case mb != nil:
		tb, e = pyMul(mb, world)
		gas = int64(1)
	default:
		return nil, nil, nil, &pyError{"AssertionError", "derivation", "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"}
	}
	if e != nil {
		return nil, nil, nil, derive(e)
	}
	assert := func(e *pyExc) *pyError { return &pyError{e.typ, "assertion", e.msg} }
	for _, c := range []struct {
		v    any
		what string
	}{{tb, "Train batch size"}, {mb, "Micro batch size per gpu"}, {gas, "Gradient accumulation steps"}} {
		ok, e := pyGT0(c.v)
		if e != nil {
			return nil, nil, nil, assert(e)
		}
		if !ok {
			return nil, nil, nil, &pyError{"AssertionError", "assertion", fmt.Sprintf("%s: %s has to be greater than 0", c.what, pyRepr(c.v))}
		}
	}
	prod, e := pyMul(mb, gas)
	if e == nil {
		prod, e = pyMul(prod, world)
	}
	if e != nil {
		return nil, nil, nil, assert(e)
	}
	if !pyEq(tb, prod) {
		return nil, nil, nil, &pyError{"AssertionError", "assertion", fmt.Sprintf(
			"Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size %s != %s * %s * %d",
			pyRepr(tb), pyRepr(mb), pyRepr(gas), world)}
	}
	return tb, mb, gas, nil
}
