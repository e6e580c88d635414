package main

// deepgo train --freeze REGEXP: fine-tuning with frozen parameters
// (model.Param.Frozen, PyTorch's requires_grad=False).

import (
	"fmt"
	"regexp"

	"github.com/deepgo-ml/deepgo/nn"
)

const freezeFlagHelp = "freeze the GPT parameters whose names match this Go regexp (e.g. 'wte|wpe' or '^transformer\\.h\\.0\\.'): they keep their initial values, with no gradient, master weights or optimizer state; a regexp matching none, or all, is an error"

// parseFreeze compiles --freeze ("": nil, nothing frozen).
func parseFreeze(s string) (*regexp.Regexp, error) {
	if s == "" {
		return nil, nil
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("--freeze %q: not a Go regexp: %w", s, err)
	}
	return re, nil
}

// checkFreeze counts what re freezes in the GPT cfg describes and returns
// the line that says so; a regexp matching no parameter, or every one
// (nothing left to train), is an error naming the flag.
func checkFreeze(re *regexp.Regexp, cfg nn.GPTConfig) (string, error) {
	g, err := nn.NewGPT(cfg)
	if err != nil {
		return "", err
	}
	defer g.Free()
	var nf, nt, ef, et int
	for _, p := range g.Params() {
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		if re.MatchString(p.Name) {
			nf, ef = nf+1, ef+n
		} else {
			nt, et = nt+1, et+n
		}
	}
	switch {
	case nf == 0:
		return "", fmt.Errorf("--freeze %q matches none of the model's %d parameters (names such as transformer.wte.weight, transformer.h.0.attn.c_attn.weight)", re, nt)
	case nt == 0:
		return "", fmt.Errorf("--freeze %q matches all of the model's %d parameters: nothing left to train", re, nf)
	}
	return fmt.Sprintf("--freeze %q: %d parameters frozen (%d elements), %d trainable (%d elements)", re, nf, ef, nt, et), nil
}

// applyFreeze marks g's parameters that re matches frozen (nil: none).
func applyFreeze(g *nn.GPT, re *regexp.Regexp) {
	if re == nil {
		return
	}
	for _, p := range g.Params() {
		p.Frozen = re.MatchString(p.Name)
	}
}
