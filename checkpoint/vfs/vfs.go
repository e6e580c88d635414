// Package vfs is the file-system seam of package checkpoint: a small FS
// interface with an OS implementation and a fault-injecting wrapper (in the
// manner of pebble's vfs and vfs/errorfs), so that tests can make any
// create, write, sync, rename or removal fail — a full disk among them —
// and check what a failed save leaves behind.
package vfs

import (
	"io"
	"os"
)

// File is an open file. Write and Sync are used by savers, Read and
// ReadAt by loaders; Stat reports the size.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Closer
	// Sync commits the file's contents (or, for a directory opened with
	// OpenDir, its entries) to stable storage.
	Sync() error
	// Stat describes the file.
	Stat() (os.FileInfo, error)
}

// FS is the set of file-system operations a checkpoint needs. Paths are
// OS paths. Errors are *os.PathError or *os.LinkError (or wrap them), so
// that errors.Is(err, fs.ErrNotExist) and syscall errors such as ENOSPC
// work through every implementation.
type FS interface {
	// Create creates or truncates name for writing.
	Create(name string) (File, error)
	// Open opens name for reading.
	Open(name string) (File, error)
	// OpenDir opens directory name so that Sync can persist its entries.
	OpenDir(name string) (File, error)
	// Rename renames oldname to newname, atomically on one file system;
	// an existing file newname is replaced, a non-empty directory is not.
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes name and everything under it; a missing name is
	// not an error.
	RemoveAll(name string) error
	// MkdirAll creates dir and any missing parents.
	MkdirAll(dir string, perm os.FileMode) error
	// Stat describes name.
	Stat(name string) (os.FileInfo, error)
	// ReadDir lists directory name, sorted by file name.
	ReadDir(name string) ([]os.DirEntry, error)
}

// OS is the operating system's file system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
}
func (osFS) Open(name string) (File, error)              { return os.Open(name) }
func (osFS) OpenDir(name string) (File, error)           { return os.Open(name) }
func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                 { return os.RemoveAll(name) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }
func (osFS) ReadDir(name string) ([]os.DirEntry, error)  { return os.ReadDir(name) }
