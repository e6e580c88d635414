package local

import "github.com/deepgo-ml/deepgo/backend"

// Backend is the rank's CPU backend: the C thread pool the rank's
// reductions run on, sized by Options.Threads. An engine given this rank
// and no backend of its own computes on it too, so that the thread count is
// set in one place.
func (c *rankComm) Backend() backend.Backend { return c.cpu }
