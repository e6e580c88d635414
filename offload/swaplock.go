package offload

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// swapLock holds a swap folder for one live run: an flock on a file beside
// it, which the kernel drops when the process ends, so a crashed run's
// folder is still taken over (and removed) by the next, while a second live
// run pointed at the same nvme_path is refused instead of deleting the
// first one's swap files under it.
type swapLock struct{ f *os.File }

// lockSwapDir checks that path (the config's nvme_path, named as key) is a
// folder, or can become one, and locks dir, a swap folder inside it.
func lockSwapDir(key, path, dir string) (*swapLock, error) {
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("offload: %s %q: not a directory", key, path)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("offload: %s %q: %w", key, path, err)
	}
	name := dir + ".lock"
	for {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("offload: %s %q: %w", key, path, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("offload: %s %q: its swap folder %s is in use by another live run (%s is locked): give each run, or each rank, its own nvme_path", key, path, dir, name)
			}
			return nil, fmt.Errorf("offload: %s %q: locking %s: %w", key, path, name, err)
		}
		// The holder removes the file before it unlocks (release): a lock
		// won on a file no longer at name is on a dead file, and a third
		// run would lock a new one beside it. Keep only a lock on the file
		// that name still is.
		held, herr := f.Stat()
		now, nerr := os.Stat(name)
		if herr == nil && nerr == nil && os.SameFile(held, now) {
			return &swapLock{f: f}, nil
		}
		f.Close()
		if herr != nil {
			return nil, fmt.Errorf("offload: %s %q: %w", key, path, herr)
		}
		if nerr != nil && !errors.Is(nerr, fs.ErrNotExist) {
			return nil, fmt.Errorf("offload: %s %q: %w", key, path, nerr)
		}
	}
}

// release removes the lock file and drops the lock; nil-safe.
func (l *swapLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := os.Remove(l.f.Name())
	err = errors.Join(err, l.f.Close())
	l.f = nil
	return err
}
