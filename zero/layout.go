package zero

import "fmt"

// ParamSpec names one parameter and its shape.
type ParamSpec struct {
	Name  string
	Shape []int
}

// Numel is the number of elements of the parameter.
func (p ParamSpec) Numel() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// ModuleSpec is one module: a name and its parameters, in model order.
type ModuleSpec struct {
	Name   string
	Params []ParamSpec
	// Persistent keeps the module's parameters gathered for the whole run at
	// stage 3, as stage3_param_persistence_threshold does for small modules:
	// for modules whose weights other modules read (a tied embedding).
	Persistent bool
}

// Slot is where one parameter lives inside a unit.
type Slot struct {
	Module int // index of the module in the model
	Param  int // index of the parameter in its module
	Offset int // element offset inside the unit
	Numel  int
}

// Unit is one flat buffer of whole parameters, padded to a multiple of
// Align×N elements and split into N equal chunks (chunk r owned by rank r).
type Unit struct {
	Index   int
	Numel   int // padded total
	Used    int // elements holding parameters (Numel minus padding)
	Slots   []Slot
	Modules []int // the modules with parameters in this unit, each once
}

// Chunk is the size of one rank's share of the unit.
func (u Unit) Chunk(world int) int { return u.Numel / world }

// Layout is the complete plan of a model's units.
type Layout struct {
	World int
	Align int
	Units []Unit
	// Where[m][p] is (unit, slot index) of parameter p of module m.
	Where [][]Where
}

// Where locates a parameter: unit index and slot index in that unit.
type Where struct{ Unit, Slot int }

// Numel is the padded total over all units.
func (l *Layout) Numel() int {
	n := 0
	for _, u := range l.Units {
		n += u.Numel
	}
	return n
}

// ShardNumel is the number of elements each rank owns.
func (l *Layout) ShardNumel() int { return l.Numel() / l.World }

// UnitsOf lists, for module m, the units holding its parameters.
func (l *Layout) UnitsOf(m int) []int {
	var out []int
	for _, w := range l.Where[m] {
		if len(out) == 0 || out[len(out)-1] != w.Unit {
			dup := false
			for _, u := range out {
				dup = dup || u == w.Unit
			}
			if !dup {
				out = append(out, w.Unit)
			}
		}
	}
	return out
}

func check(mods []ModuleSpec, world, align int) error {
	if world < 1 {
		return fmt.Errorf("zero: world size %d: must be >= 1", world)
	}
	if align < 1 {
		return fmt.Errorf("zero: align %d: must be >= 1", align)
	}
	for i, m := range mods {
		for j, p := range m.Params {
			for _, d := range p.Shape {
				if d < 0 {
					return fmt.Errorf("zero: module %d (%s) param %d (%s): shape %v: dimensions must be >= 0", i, m.Name, j, p.Name, p.Shape)
				}
			}
		}
	}
	return nil
}

func pad(n, m int) int { return (n + m - 1) / m * m }

type builder struct {
	l   Layout
	cur *Unit
}

func (b *builder) add(m, p, n int) {
	if b.cur == nil {
		b.l.Units = append(b.l.Units, Unit{Index: len(b.l.Units)})
		b.cur = &b.l.Units[len(b.l.Units)-1]
	}
	u := b.cur
	u.Slots = append(u.Slots, Slot{Module: m, Param: p, Offset: u.Used, Numel: n})
	u.Used += n
	if len(u.Modules) == 0 || u.Modules[len(u.Modules)-1] != m {
		u.Modules = append(u.Modules, m)
	}
	b.l.Where[m][p] = Where{Unit: u.Index, Slot: len(u.Slots) - 1}
}

func (b *builder) close() {
	if b.cur == nil {
		return
	}
	b.cur.Numel = max(pad(b.cur.Used, b.l.Align*b.l.World), b.l.Align*b.l.World)
	b.cur = nil
}

func newBuilder(mods []ModuleSpec, world, align int) *builder {
	b := &builder{l: Layout{World: world, Align: align, Where: make([][]Where, len(mods))}}
	for i, m := range mods {
		b.l.Where[i] = make([]Where, len(m.Params))
	}
	return b
}

// PlanBuckets lays out the parameters of mods as gradient buckets for
// stages 0-2: walking modules last to first and each module's parameters
// last to first (the order backward produces gradients), a unit is closed
// when adding the next parameter would take it past bucket elements; a
// parameter larger than bucket gets a unit of its own. bucket <= 0 means
// one unit for the whole model. Parameters with no elements are placed
// with zero size.
func PlanBuckets(mods []ModuleSpec, world, align, bucket int) (*Layout, error) {
	if err := check(mods, world, align); err != nil {
		return nil, err
	}
	b := newBuilder(mods, world, align)
	for m := len(mods) - 1; m >= 0; m-- {
		for p := len(mods[m].Params) - 1; p >= 0; p-- {
			n := mods[m].Params[p].Numel()
			if bucket > 0 && b.cur != nil && b.cur.Used > 0 && b.cur.Used+n > bucket {
				b.close()
			}
			b.add(m, p, n)
		}
	}
	b.close()
	return &b.l, nil
}

// PlanModules lays out one unit per module (in module order) for stage 3,
// so that each module is gathered by one all-gather. A module without
// parameters gets no unit (Where is empty for it).
func PlanModules(mods []ModuleSpec, world, align int) (*Layout, error) {
	if err := check(mods, world, align); err != nil {
		return nil, err
	}
	b := newBuilder(mods, world, align)
	for m := range mods {
		if len(mods[m].Params) == 0 {
			continue
		}
		for p := range mods[m].Params {
			b.add(m, p, mods[m].Params[p].Numel())
		}
		b.close()
	}
	return &b.l, nil
}

// ReduceScaling returns the factors DeepSpeed 0.19.8 applies around a
// gradient sum-reduction over n data-parallel ranks at ZeRO stage: multiply
// by pre before, sum, multiply by post after. Where the division by n
// happens matters beyond rounding: a sum of n half-precision gradients can
// overflow where their average does not, and an fp16 run then skips steps
// and lowers its loss scale as the world grows.
//
//   - gradient_allreduce_op "sum" (sumOp): pre = 1/predivide, post =
//     predivide, no division by n.
//   - Stage 0 (the engine's all-reduce), and stages 1-2 with
//     reduce_scatter false (gradient_reduction_w_predivide): post-scaled
//     by default, pre = 1/predivide, post = predivide/n;
//     prescale_gradients: pre = 1/n, post = 1.
//   - Stages 1-2 with reduce_scatter (the default; average_tensor) and
//     stage 3 with it (reduce_scatter_coalesced): pre = 1/n, post = 1;
//     predivide and prescale play no part (at stages 2 and 3 DeepSpeed
//     refuses them, and so does config's check).
//   - Stage 3 with reduce_scatter false: pre = 1/(predivide·n), post =
//     predivide.
func ReduceScaling(stage, n int, predivide float64, prescale, sumOp, reduceScatter bool) (pre, post float64) {
	if predivide <= 0 {
		predivide = 1
	}
	switch {
	case sumOp:
		return 1 / predivide, predivide
	case stage >= 1 && reduceScatter:
		return 1 / float64(n), 1
	case stage == 3:
		return 1 / (predivide * float64(n)), predivide
	case prescale:
		return 1 / float64(n), 1
	}
	return 1 / predivide, predivide / float64(n)
}
