package deepgo

// Initial parameter values: Initialize copies them into engine memory; the
// ones a model donates (model.Param.Donate) the engine frees once copied.

import (
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// donations checks the donated initial values among an engine's params
// before anything is copied and returns their Params. A donated tensor
// must cover its whole storage (freeing it frees the storage, so a view
// would take its neighbours along), and no two may share one (the second
// would be read freed).
func donations(params [][]*model.Param) ([]donation, error) {
	owner := map[*tensor.Storage]string{}
	seen := map[*model.Param]bool{} // a Param two modules share (a tied weight) is one donation
	var out []donation
	for _, ps := range params {
		for _, p := range ps {
			if !p.Donate || p.Data == nil || seen[p] { // a missing value is zero.New's error to report
				continue
			}
			seen[p] = true
			name := p.Name
			st := p.Data.Storage()
			if p.Data.Offset() != 0 || p.Data.Bytes() != st.Bytes() {
				return nil, fmt.Errorf("deepgo.Initialize: parameter %s: Donate is set, but Data %v is %d bytes at element %d of a %d-byte storage: only a tensor covering its whole storage can be donated (freeing a view frees the storage); clear Donate and free the buffer yourself after Initialize", name, p.Data, p.Data.Bytes(), p.Data.Offset(), st.Bytes())
			}
			if other, dup := owner[st]; dup {
				return nil, fmt.Errorf("deepgo.Initialize: parameters %s and %s: both donate the same storage: each donated initial value needs a storage of its own", other, name)
			}
			owner[st] = name
			out = append(out, donation{name, p})
		}
	}
	return out, nil
}

// donation is a donated parameter and its name for errors.
type donation struct {
	name string
	p    *model.Param
}

// freeDonated frees the donated initial values, now copied, and clears
// Donate: the hand-over happens once.
func freeDonated(ds []donation) error {
	var errs []error
	for _, d := range ds {
		if err := d.p.Data.Free(); err != nil {
			errs = append(errs, fmt.Errorf("deepgo.Initialize: freeing the donated initial value of %s: %w", d.name, err))
		}
		d.p.Donate = false
	}
	return errors.Join(errs...)
}
