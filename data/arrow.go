package data

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// ColumnError is a dataset column that is missing or of a type that does
// not hold token ids.
type ColumnError struct {
	Path, Column string
	Msg          string
}

func (e *ColumnError) Error() string {
	return fmt.Sprintf("data: %s: column %q: %s", e.Path, e.Column, e.Msg)
}

// ReadArrow reads the token-id column of an Arrow IPC file: the streaming
// format (Hugging Face datasets' data-*.arrow) or the random-access file
// format. The column is list<int32|int64> (one document per row) or a flat
// int32/int64 column; documents are concatenated in row order.
func ReadArrow(path, column string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data.ReadArrow: %w", err)
	}
	defer f.Close()
	var recs []arrow.RecordBatch
	var schema *arrow.Schema
	if r, err := ipc.NewReader(f, ipc.WithAllocator(memory.DefaultAllocator)); err == nil {
		defer r.Release()
		schema = r.Schema()
		for r.Next() {
			rec := r.RecordBatch()
			rec.Retain()
			recs = append(recs, rec)
		}
		if err := r.Err(); err != nil {
			return nil, fmt.Errorf("data.ReadArrow: %s: %w", path, err)
		}
	} else {
		// not a stream: try the file format (magic "ARROW1")
		if _, serr := f.Seek(0, 0); serr != nil {
			return nil, fmt.Errorf("data.ReadArrow: %s: %w", path, serr)
		}
		fr, ferr := ipc.NewFileReader(f, ipc.WithAllocator(memory.DefaultAllocator))
		if ferr != nil {
			return nil, fmt.Errorf("data.ReadArrow: %s: not an Arrow IPC stream (%v) or file (%v)", path, err, ferr)
		}
		defer fr.Close()
		schema = fr.Schema()
		for i := 0; i < fr.NumRecords(); i++ {
			rec, err := fr.RecordBatch(i)
			if err != nil {
				return nil, fmt.Errorf("data.ReadArrow: %s: record batch %d: %w", path, i, err)
			}
			rec.Retain()
			recs = append(recs, rec)
		}
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	idx, err := columnIndex(path, column, schema)
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, r := range recs {
		if ids, err = appendIDs(ids, path, column, r.Column(idx)); err != nil {
			return nil, err
		}
	}
	return tokensOrErr(path, column, ids)
}

// ReadParquet reads the token-id column of a Parquet file, with the same
// column rules as ReadArrow.
func ReadParquet(path, column string) (*Tokens, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("data.ReadParquet: %w", err)
	}
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return nil, fmt.Errorf("data.ReadParquet: %s: %w", path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("data.ReadParquet: %s: %w", path, err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		return nil, fmt.Errorf("data.ReadParquet: %s: %w", path, err)
	}
	defer tbl.Release()
	idx, err := columnIndex(path, column, tbl.Schema())
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, ch := range tbl.Column(idx).Data().Chunks() {
		if ids, err = appendIDs(ids, path, column, ch); err != nil {
			return nil, err
		}
	}
	return tokensOrErr(path, column, ids)
}

func tokensOrErr(path, column string, ids []int32) (*Tokens, error) {
	if len(ids) == 0 {
		return nil, &ColumnError{Path: path, Column: column, Msg: "no tokens: the file has no rows or only empty ones"}
	}
	t, err := newTokens(ids, 0)
	if err != nil {
		return nil, &ColumnError{Path: path, Column: column, Msg: err.Error()}
	}
	return t, nil
}

func columnIndex(path, column string, s *arrow.Schema) (int, error) {
	idx := s.FieldIndices(column)
	if len(idx) == 0 {
		names := make([]string, 0, s.NumFields())
		for _, f := range s.Fields() {
			names = append(names, f.Name)
		}
		return 0, &ColumnError{Path: path, Column: column, Msg: fmt.Sprintf("no such column (the columns are %q)", names)}
	}
	return idx[0], nil
}

var errNotTokens = errors.New("want list<int32|int64> or int32/int64")

// appendIDs appends the token ids of one chunk of the column.
func appendIDs(ids []int32, path, column string, a arrow.Array) ([]int32, error) {
	bad := func(msg string) error { return &ColumnError{Path: path, Column: column, Msg: msg} }
	switch c := a.(type) {
	case *array.Int32:
		return appendInts(ids, c.Len(), c.IsNull, func(i int) int64 { return int64(c.Value(i)) }, bad)
	case *array.Int64:
		return appendInts(ids, c.Len(), c.IsNull, c.Value, bad)
	case array.ListLike:
		vals := c.ListValues()
		var get func(int) int64
		var isNull func(int) bool
		switch v := vals.(type) {
		case *array.Int32:
			get, isNull = func(i int) int64 { return int64(v.Value(i)) }, v.IsNull
		case *array.Int64:
			get, isNull = v.Value, v.IsNull
		default:
			return nil, bad(fmt.Sprintf("type %v: list of %v, %v", a.DataType(), vals.DataType(), errNotTokens))
		}
		for r := 0; r < c.Len(); r++ {
			if c.IsNull(r) {
				continue
			}
			lo, hi := c.ValueOffsets(r)
			for i := lo; i < hi; i++ {
				if isNull(int(i)) {
					return nil, bad(fmt.Sprintf("row %d: null token", r))
				}
				v := get(int(i))
				if v < 0 || v > 1<<31-1 {
					return nil, bad(fmt.Sprintf("row %d: token id %d out of range", r, v))
				}
				ids = append(ids, int32(v))
			}
		}
		return ids, nil
	}
	return nil, bad(fmt.Sprintf("type %v: %v", a.DataType(), errNotTokens))
}

func appendInts(ids []int32, n int, isNull func(int) bool, get func(int) int64, bad func(string) error) ([]int32, error) {
	for i := 0; i < n; i++ {
		if isNull(i) {
			return nil, bad(fmt.Sprintf("row %d: null token", i))
		}
		v := get(i)
		if v < 0 || v > 1<<31-1 {
			return nil, bad(fmt.Sprintf("row %d: token id %d out of range", i, v))
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}
