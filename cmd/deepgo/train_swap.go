package main

import (
	"errors"
	"os"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
)

// removeSwapFolders deletes rank's swap folders (deepgo.SwapFolders; the
// engines name them by the world rank, deepgo train's rank) and their lock
// files: on an interrupt the process exits without closing its engines,
// which would have removed them, and the files are as large as the
// optimizer state or the parameters. (Files still open are freed when the
// process ends.)
func removeSwapFolders(cfg *config.Config, rank int) error {
	var errs []error
	for _, d := range deepgo.SwapFolders(cfg, rank) {
		errs = append(errs, os.RemoveAll(d))
		if err := os.Remove(d + ".lock"); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
