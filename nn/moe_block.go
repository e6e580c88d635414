package nn

import (
	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
)

// A block's MLP is either GPT-2's (FC, GELU, FCProj) or an MoE layer;
// these are the block's calls that differ.

// hidden is the MLP's inner width (4C).
func (k *Block) hidden() int {
	if k.MoE != nil {
		return k.MoE.Hidden
	}
	return k.FC.Out
}

func (k *Block) mlpParams() []HasParams {
	if k.MoE != nil {
		return []HasParams{k.MoE}
	}
	return []HasParams{k.FC, k.FCProj}
}

func (k *Block) mlpCheck(op string, dev tensor.Device, grad bool) error {
	if k.MoE != nil {
		return k.MoE.check(op, dev, grad)
	}
	if err := k.FC.check(op, dev, grad); err != nil {
		return err
	}
	return k.FCProj.check(op, dev, grad)
}

func (k *Block) newMLPActivations(a *Arena, s *BlockActivations, n int) error {
	var err error
	if k.MoE != nil {
		s.MoE, err = k.MoE.newActs(a, n)
		return err
	}
	if s.FC, err = a.Float32(n, k.FC.Out); err != nil {
		return err
	}
	s.FCAct, err = a.Float32(n, k.FC.Out)
	return err
}

// mlpForward writes out[n, C] from acts.LN2.
func (k *Block) mlpForward(be backend.NN, out *tensor.Tensor, acts *BlockActivations, n int) error {
	if k.MoE != nil {
		return k.MoE.forward(be, out, acts.LN2, acts.MoE, n)
	}
	if err := k.FC.Forward(be, acts.FC, acts.LN2, n); err != nil {
		return err
	}
	if err := k.Act.Forward(be, acts.FCAct, acts.FC, n*k.FC.Out); err != nil {
		return err
	}
	return k.FCProj.Forward(be, out, acts.FCAct, n)
}

// mlpBackward writes dln[n, C] (whatever it held) from the MLP's output
// gradient dout, accumulating the MLP's parameter gradients.
func (k *Block) mlpBackward(be backend.NN, dln, dout *tensor.Tensor, acts *BlockActivations, s *BlockScratch, n int) error {
	if k.MoE != nil {
		return k.MoE.backward(be, dln, dout, acts.LN2, acts.MoE, n)
	}
	if err := k.FCProj.backwardWrite(be, s.DFCAct, dout, acts.FCAct, n); err != nil {
		return err
	}
	if err := k.Act.backwardWrite(be, s.DFC, acts.FC, s.DFCAct, n*k.FC.Out); err != nil {
		return err
	}
	return k.FC.backwardWrite(be, dln, s.DFC, acts.LN2, n)
}
