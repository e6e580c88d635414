package zero

// This file holds the gradient downloads of CPU optimizer offload: at the
// accumulation-boundary micro-step each unit's reduced gradient chunk is
// copied to its host buffer (backend.CopyAsync) as soon as it is final,
// while backward and the other reductions go on; Step waits for a unit's
// copy before stepping the sub-groups that read it.

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// GradDownloads counts the device-to-host gradient copies of CPU
// optimizer offload (Config.HostOffload).
type GradDownloads struct {
	// Started is the number of unit gradient chunks copied down.
	Started int64
	// Early is how many of them started before Step: as their reduction
	// finished in a boundary micro-step's backward (stages 2-3), at its
	// end (stages 0-1, one rank) or as the boundary reduction went
	// (stages 0-1, several ranks), rather than at the step.
	Early int64
}

// GradDownloads reports the gradient copies so far.
func (z *Optimizer) GradDownloads() GradDownloads { return z.downStats }

// SetAccumulationBoundary tells the Optimizer whether the micro-step just
// begun (BeginMicroStep) ends with an optimizer step. With CPU offload the
// reduced gradients of such a micro-step are final as they are reduced and
// start down to the host then; without the call (or with false) they go
// down at Step. A caller that changes the gradients between backward and
// Step (the pipeline engine's tied weights) leaves it false. Copies a
// repeated backward left in flight are waited for first: this backward
// writes the chunks they read.
func (z *Optimizer) SetAccumulationBoundary(on bool) error {
	err := z.settleDownloads(context.Background())
	z.boundary = on
	return err
}

// earlyDownload starts unit u's download of its final chunk g when this is
// a boundary micro-step with offload.
func (z *Optimizer) earlyDownload(u int, g *tensor.Tensor) error {
	if !z.offloaded() || !z.boundary || g.Numel() == 0 {
		return nil
	}
	if err := z.startDownload(u, g); err != nil {
		return err
	}
	z.downStats.Early++
	return nil
}

// earlyDownloadAll starts every unit's download (stages 0-1, one rank: the
// chunks are final when backward ends).
func (z *Optimizer) earlyDownloadAll() error {
	if !z.offloaded() || !z.boundary {
		return nil
	}
	g, err := z.grads()
	if err != nil {
		return err
	}
	for u := range g {
		if err := z.earlyDownload(u, g[u]); err != nil {
			return err
		}
	}
	return nil
}

// startDownload starts copying unit u's gradient chunk g into its host
// buffer. A copy of u still in flight is waited for first: g is about to
// be replaced.
func (z *Optimizer) startDownload(u int, g *tensor.Tensor) error {
	if err := z.settleDownload(context.Background(), u); err != nil {
		return err
	}
	if g.Numel() == 0 {
		return nil // a unit this rank owns nothing of
	}
	c, err := backend.CopyAsync(z.be, z.hostGrad[u], g)
	if err != nil {
		return fmt.Errorf("zero: copying the gradients of bucket %d to the host: %w", u, err)
	}
	z.down[u] = c
	z.downStats.Started++
	return nil
}

// settleDownload waits for unit u's copy, if any, and forgets it: before
// its host buffer is read or the device chunk it reads is written again.
func (z *Optimizer) settleDownload(ctx context.Context, u int) error {
	if z.down == nil || z.down[u] == nil {
		return nil
	}
	c := z.down[u]
	err := c.Wait(ctx)
	z.down[u] = nil
	if err != nil {
		return fmt.Errorf("zero: copying the gradients of bucket %d to the host: %w", u, err)
	}
	return nil
}

// settleDownloads waits for every copy in flight, whatever ctx says: the
// host buffers may be neither read nor written before, and the boundary
// is over.
func (z *Optimizer) settleDownloads(ctx context.Context) error {
	z.boundary = false
	ctx = context.WithoutCancel(ctx)
	var first error
	for u := range z.down {
		if err := z.settleDownload(ctx, u); err != nil && first == nil {
			first = err
		}
	}
	return first
}
