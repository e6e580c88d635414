package doctor

import (
	"strings"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/rundir"
)

// The targets the rules check, from the user's document.
const (
	// MemoryTarget is §6's memory use below 90% of capacity.
	MemoryTarget = 0.90
	// CommTarget is §6's communication below 25% of the step time.
	CommTarget = 0.25
	// BubbleTarget is §2.2's pipeline bubble below 15%.
	BubbleTarget = 0.15
	// SpikeRatio is how far above the median of the steps before it a loss
	// must jump to count as a spike.
	SpikeRatio = 1.3
	// SpikeWindow is how many earlier steps that median covers.
	SpikeWindow = 20
	// SpikeMinHistory is how many earlier finite losses a step needs
	// before it can count as a spike: the first ones have no median yet.
	SpikeMinHistory = 5
	// StormRate is the share of steps (after the scaler's first
	// calibration) skipped for overflow that makes a storm, where DeepSpeed's
	// dynamic scaler expects one per loss_scale_window (1000) steps.
	StormRate = 0.05
	// StormMin is the fewest overflows that can make a storm.
	StormMin = 3
)

// Input is what the rules read.
type Input struct {
	// Run is the measured run.
	Run *rundir.Run
	// Config is the run's DeepSpeed config; nil when unknown, which leaves
	// out the advice that needs it and the pipeline rule.
	Config *config.Config
}

// Finding is one row of the diagnosis table that the run matches.
type Finding struct {
	// Rule is the rule's name: memory, communication, spikes, overflow or bubble.
	Rule string
	// Title is the symptom, as §4.2 names it.
	Title string
	// Evidence are the measured numbers that triggered the finding, with the target.
	Evidence []string
	// Advice are the changes to try, each with its estimated effect.
	Advice []Advice
}

// Advice is one change to try.
type Advice struct {
	// Text says what to change, and why.
	Text string
	// SavingBytes is the estimated memory per rank the change frees (memory rule only; 0 otherwise).
	SavingBytes int64
}

// Rule is one diagnosis: it returns a line saying what it measured (or why
// it could not) and a Finding when the run misses the target.
type Rule struct {
	// Name is the rule's name (Finding.Rule).
	Name string
	// Check applies the rule.
	Check func(Input) (checked string, f *Finding)
	// Measures is true for a rule that reads the run's csv_monitor
	// series; its line starts with NotMeasured when the run has none of
	// those it reads. (The bubble rule reads only the config.)
	Measures bool
}

// NotMeasured starts the line of a rule that found none of the series it
// reads in the run.
const NotMeasured = "not measured"

// Rules are the §4.2 diagnoses, in the table's order.
var Rules = []Rule{
	{Name: ruleMemory, Check: checkMemory, Measures: true},
	{Name: ruleComm, Check: checkComm, Measures: true},
	{Name: ruleSpikes, Check: checkSpikes, Measures: true},
	{Name: ruleOverflow, Check: checkOverflow, Measures: true},
	{Name: ruleBubble, Check: checkBubble},
}

const (
	ruleMemory   = "memory"
	ruleComm     = "communication"
	ruleSpikes   = "spikes"
	ruleOverflow = "overflow"
	ruleBubble   = "bubble"
)

// Report is the doctor's answer for one run.
type Report struct {
	// Checked has one line per rule: what it measured, or why it could not.
	Checked []string
	// Findings are the rules the run matches; empty for a healthy run.
	Findings []Finding
	// Measured counts the rules that measured something in the run's
	// series (Rule.Measures, their line not NotMeasured). Zero means the
	// run holds none of the series the rules read, so that no finding
	// says nothing about its health.
	Measured int
}

// Diagnose applies every rule to in.
func Diagnose(in Input) Report {
	var r Report
	for _, rule := range Rules {
		checked, f := rule.Check(in)
		r.Checked = append(r.Checked, rule.Name+": "+checked)
		if rule.Measures && !strings.HasPrefix(checked, NotMeasured) {
			r.Measured++
		}
		if f != nil {
			f.Rule = rule.Name
			r.Findings = append(r.Findings, *f)
		}
	}
	return r
}

// gradAccum is the run's micro-batches per optimizer step: the config's
// gradient_accumulation_steps, else the one DeepSpeed's batch rules give
// for the run's world (deepgo_run.json's, every parallel dimension
// included; a config may give only train_batch_size and the micro-batch),
// else 1.
func (in Input) gradAccum() int {
	cfg := in.Config
	if cfg.GradientAccumulationSteps != nil {
		return *cfg.GradientAccumulationSteps
	}
	if in.Run != nil && in.Run.Info != nil && in.Run.Info.World > 0 {
		if b, err := cfg.Resolve(in.Run.Info.World, 0, 0, 0); err == nil {
			return b.GradAccum
		}
	}
	return 1
}
