package vfs

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Op is a kind of file-system operation an Injector sees.
type Op uint8

// Operations.
const (
	OpCreate Op = iota
	OpOpen
	OpWrite
	OpRead
	OpSync
	OpRename
	OpRemove
	OpMkdir
	OpStat
	OpReadDir
)

var opNames = [...]string{"create", "open", "write", "read", "sync", "rename", "remove", "mkdir", "stat", "readdir"}

// String is the lower-case name of the operation, e.g. "write".
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// An Injector decides, before each operation, whether it fails. path is
// the file (for rename, the source); n is the byte count of a write or
// read (0 otherwise). It returns nil to let the operation run, or the
// error to fail it with; for OpWrite it may instead return a positive
// short count: only that many bytes are written and the error is returned
// after them (a disk filling up mid-write). String names the fault, so
// that a failing test says what was injected.
type Injector interface {
	Inject(op Op, path string, n int) (short int, err error)
	String() string
}

// WithFaults wraps fs so that inj is consulted before every operation.
func WithFaults(fs FS, inj Injector) FS { return &faultFS{fs: fs, inj: inj} }

type faultFS struct {
	fs  FS
	inj Injector
}

func (f *faultFS) check(op Op, path string) error {
	_, err := f.inj.Inject(op, path, 0)
	return err
}

func pathErr(op Op, path string, err error) error {
	return &os.PathError{Op: op.String(), Path: path, Err: err}
}

func (f *faultFS) Create(name string) (File, error) {
	if err := f.check(OpCreate, name); err != nil {
		return nil, pathErr(OpCreate, name, err)
	}
	fl, err := f.fs.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: fl, fs: f, name: name}, nil
}

func (f *faultFS) Open(name string) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, pathErr(OpOpen, name, err)
	}
	fl, err := f.fs.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: fl, fs: f, name: name}, nil
}

func (f *faultFS) OpenDir(name string) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, pathErr(OpOpen, name, err)
	}
	fl, err := f.fs.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: fl, fs: f, name: name}, nil
}

func (f *faultFS) Rename(oldname, newname string) error {
	if err := f.check(OpRename, oldname); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return f.fs.Rename(oldname, newname)
}

func (f *faultFS) Remove(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return pathErr(OpRemove, name, err)
	}
	return f.fs.Remove(name)
}

func (f *faultFS) RemoveAll(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return pathErr(OpRemove, name, err)
	}
	return f.fs.RemoveAll(name)
}

func (f *faultFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := f.check(OpMkdir, dir); err != nil {
		return pathErr(OpMkdir, dir, err)
	}
	return f.fs.MkdirAll(dir, perm)
}

func (f *faultFS) Stat(name string) (os.FileInfo, error) {
	if err := f.check(OpStat, name); err != nil {
		return nil, pathErr(OpStat, name, err)
	}
	return f.fs.Stat(name)
}

func (f *faultFS) ReadDir(name string) ([]os.DirEntry, error) {
	if err := f.check(OpReadDir, name); err != nil {
		return nil, pathErr(OpReadDir, name, err)
	}
	return f.fs.ReadDir(name)
}

type faultFile struct {
	File
	fs   *faultFS
	name string
}

func (f *faultFile) Write(p []byte) (int, error) {
	short, err := f.fs.inj.Inject(OpWrite, f.name, len(p))
	if err != nil {
		if short > 0 && short < len(p) {
			n, werr := f.File.Write(p[:short])
			if werr != nil {
				return n, werr
			}
			return n, pathErr(OpWrite, f.name, err)
		}
		return 0, pathErr(OpWrite, f.name, err)
	}
	return f.File.Write(p)
}

func (f *faultFile) Read(p []byte) (int, error) {
	if _, err := f.fs.inj.Inject(OpRead, f.name, len(p)); err != nil {
		return 0, pathErr(OpRead, f.name, err)
	}
	return f.File.Read(p)
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if _, err := f.fs.inj.Inject(OpRead, f.name, len(p)); err != nil {
		return 0, pathErr(OpRead, f.name, err)
	}
	return f.File.ReadAt(p, off)
}

func (f *faultFile) Sync() error {
	if _, err := f.fs.inj.Inject(OpSync, f.name, 0); err != nil {
		return pathErr(OpSync, f.name, err)
	}
	return f.File.Sync()
}

// DiskFull is an Injector that lets Limit bytes be written in all and
// fails every write beyond with ENOSPC (writing the bytes that still
// fit), like a file system that fills up. Removing files does not free
// space. Safe for concurrent use.
type DiskFull struct {
	Limit int64

	mu      sync.Mutex
	written int64
}

// Inject implements Injector.
func (d *DiskFull) Inject(op Op, path string, n int) (int, error) {
	if op != OpWrite {
		return 0, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	left := d.Limit - d.written
	if int64(n) <= left {
		d.written += int64(n)
		return 0, nil
	}
	short := int(max(left, 0))
	d.written += int64(short)
	return short, syscall.ENOSPC
}

// Written is the number of bytes let through so far.
func (d *DiskFull) Written() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.written
}

// String implements Injector.
func (d *DiskFull) String() string { return fmt.Sprintf("disk full after %d bytes", d.Limit) }

// OnOp is an Injector that fails operations of kind Op on paths whose base
// name matches the glob Match ("" matches every path) with Err, starting
// with the After-th such operation (0: the first) and, when Once is set,
// only that one. Safe for concurrent use.
type OnOp struct {
	Op    Op
	Match string
	Err   error
	After int
	Once  bool

	mu   sync.Mutex
	seen int
}

// Inject implements Injector.
func (o *OnOp) Inject(op Op, path string, n int) (int, error) {
	if op != o.Op {
		return 0, nil
	}
	if o.Match != "" {
		if ok, _ := filepath.Match(o.Match, filepath.Base(path)); !ok {
			return 0, nil
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	i := o.seen
	o.seen++
	if i < o.After || (o.Once && i > o.After) {
		return 0, nil
	}
	return 0, o.Err
}

// String implements Injector.
func (o *OnOp) String() string {
	return fmt.Sprintf("%v of %q fails with %v from occurrence %d (once=%v)", o.Op, o.Match, o.Err, o.After, o.Once)
}
