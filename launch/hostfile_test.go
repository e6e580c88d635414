package launch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseHostfile(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []Host
		err        string // a substring of the error
	}{
		{name: "DeepSpeed's example", text: "worker-1 slots=4\nworker-2 slots=4\n",
			want: []Host{{"worker-1", []int{0, 1, 2, 3}}, {"worker-2", []int{0, 1, 2, 3}}}},
		{name: "comments and blank lines", text: "# the cluster\n\nworker-1 slots=2  # two GPUs\n   \n\tworker-2\tslots=1\n",
			want: []Host{{"worker-1", []int{0, 1}}, {"worker-2", []int{0}}}},
		{name: "one host", text: "localhost slots=1", want: []Host{{"localhost", []int{0}}}},
		{name: "duplicate host", text: "a slots=1\nb slots=1\na slots=2\n", err: `line 3 "a slots=2": host a is already defined on line 1`},
		{name: "slots not a number", text: "a slots=1\nb slots=x\n", err: `line 2 "b slots=x": slots must be an integer >= 1`},
		{name: "zero slots", text: "a slots=0\n", err: `line 1 "a slots=0": slots must be an integer >= 1`},
		{name: "no slots", text: "a\n", err: `line 1 "a": want "HOST slots=N"`},
		{name: "extra field", text: "a slots=1 b\n", err: `line 1 "a slots=1 b": want "HOST slots=N"`},
		{name: "empty", text: "# nothing\n", err: "names no host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHostfile(strings.NewReader(tc.text), "hf")
			if err != nil {
				assert.Contains(t, err.Error(), "hostfile hf")
			}
			check(t, got, err, tc.want, tc.err)
		})
	}
}

func hosts4x4() []Host {
	return []Host{{"worker-0", count(4)}, {"worker-1", count(4)}, {"worker-2", count(4)}, {"worker-3", count(4)}}
}

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		name, include, exclude string
		want                   []Host
		err                    string
	}{
		{name: "none", want: hosts4x4()},
		// DeepSpeed's documentation: "--include="worker-2:0,1"" runs on GPUs 0 and 1 of worker-2 only
		{name: "doc include", include: "worker-2:0,1", want: []Host{{"worker-2", []int{0, 1}}}},
		// and "--exclude="worker-2:0@worker-3:0,1"" drops GPU 0 of worker-2 and GPUs 0, 1 of worker-3
		{name: "doc exclude", exclude: "worker-2:0@worker-3:0,1",
			want: []Host{{"worker-0", count(4)}, {"worker-1", count(4)}, {"worker-2", []int{1, 2, 3}}, {"worker-3", []int{2, 3}}}},
		{name: "include whole hosts keeps hostfile order", include: "worker-3@worker-1",
			want: []Host{{"worker-1", count(4)}, {"worker-3", count(4)}}},
		{name: "include mixed", include: "worker-0:3,1,1@worker-2",
			want: []Host{{"worker-0", []int{1, 3}}, {"worker-2", count(4)}}},
		{name: "exclude a whole host", exclude: "worker-0",
			want: []Host{{"worker-1", count(4)}, {"worker-2", count(4)}, {"worker-3", count(4)}}},
		{name: "exclude every slot of a host drops it", exclude: "worker-1:0,1,2,3@worker-2@worker-3",
			want: []Host{{"worker-0", count(4)}}},
		{name: "both", include: "worker-0", exclude: "worker-1", err: "mutually exclusive"},
		{name: "unknown host", include: "worker-9:0", err: `--include "worker-9:0": host worker-9 is not among the hosts worker-0, worker-1, worker-2, worker-3`},
		{name: "unknown slot", exclude: "worker-1:4", err: `--exclude "worker-1:4": host worker-1 has no slot 4 (its slots: [0 1 2 3])`},
		{name: "bad slot", include: "worker-1:a", err: `slot "a" of host worker-1: want an integer >= 0`},
		{name: "empty host", include: "worker-1@", err: "empty host name"},
		{name: "host twice", include: "worker-1:0@worker-1:1", err: "host worker-1 named twice"},
		{name: "nothing left", exclude: "worker-0@worker-1@worker-2@worker-3", err: "leaves no slot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Filter(hosts4x4(), tc.include, tc.exclude)
			check(t, got, err, tc.want, tc.err)
		})
	}
}

func TestLimit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		nodes, gpus int
		want        []Host
		err         string
	}{
		{name: "all", want: hosts4x4()},
		{name: "num_nodes 2", nodes: 2, want: []Host{{"worker-0", count(4)}, {"worker-1", count(4)}}},
		{name: "num_gpus 1", gpus: 1, want: []Host{{"worker-0", count(1)}, {"worker-1", count(1)}, {"worker-2", count(1)}, {"worker-3", count(1)}}},
		{name: "both", nodes: 1, gpus: 2, want: []Host{{"worker-0", count(2)}}},
		{name: "too many nodes", nodes: 5, err: "--num_nodes 5: only 4 hosts"},
		{name: "too many gpus", gpus: 8, err: "--num_gpus 8: host worker-0 has 4 slots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Limit(hosts4x4(), tc.nodes, tc.gpus)
			check(t, got, err, tc.want, tc.err)
		})
	}
}
