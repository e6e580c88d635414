package launch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// parseFilter reads DeepSpeed's filter syntax, "host1:0,1@host2": hosts
// separated by "@", each with an optional ":"-list of slots (none: the
// whole host). flag names the flag in errors. It returns the hosts in the
// order given and their slots (nil: all).
func parseFilter(flag, s string) ([]string, map[string][]int, error) {
	var order []string
	slots := map[string][]int{}
	for part := range strings.SplitSeq(s, "@") {
		name, list, hasSlots := strings.Cut(strings.TrimSpace(part), ":")
		if name == "" {
			return nil, nil, fmt.Errorf("launch: %s %q: empty host name (want host1:0,1@host2)", flag, s)
		}
		if _, dup := slots[name]; dup {
			return nil, nil, fmt.Errorf("launch: %s %q: host %s named twice", flag, s, name)
		}
		order = append(order, name)
		slots[name] = nil
		if !hasSlots {
			continue
		}
		for v := range strings.SplitSeq(list, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				return nil, nil, fmt.Errorf("launch: %s %q: slot %q of host %s: want an integer >= 0", flag, s, v, name)
			}
			if !slices.Contains(slots[name], n) {
				slots[name] = append(slots[name], n)
			}
		}
		slices.Sort(slots[name])
	}
	return order, slots, nil
}

// Filter applies --include or --exclude (at most one of them, in
// DeepSpeed's syntax) to hosts: include keeps only what it names, exclude
// drops what it names; hosts left with no slot are dropped, and the hosts
// keep their order. A host or slot that hosts does not have is an error.
func Filter(hosts []Host, include, exclude string) ([]Host, error) {
	if include != "" && exclude != "" {
		return nil, fmt.Errorf("launch: --include %q and --exclude %q are mutually exclusive", include, exclude)
	}
	flag, spec := "--include", include
	if exclude != "" {
		flag, spec = "--exclude", exclude
	}
	if spec == "" {
		return hosts, nil
	}
	_, named, err := parseFilter(flag, spec)
	if err != nil {
		return nil, err
	}
	byName := map[string]Host{}
	for _, h := range hosts {
		byName[h.Name] = h
	}
	for name, sl := range named {
		h, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("launch: %s %q: host %s is not among the hosts %s", flag, spec, name, hostNames(hosts))
		}
		for _, s := range sl {
			if !slices.Contains(h.Slots, s) {
				return nil, fmt.Errorf("launch: %s %q: host %s has no slot %d (its slots: %v)", flag, spec, name, s, h.Slots)
			}
		}
	}
	var out []Host
	for _, h := range hosts {
		sl, isNamed := named[h.Name]
		var keep []int
		switch {
		case include != "" && isNamed && sl == nil:
			keep = h.Slots
		case include != "" && isNamed:
			keep = sl
		case include != "":
		case isNamed && sl == nil:
		case isNamed:
			keep = slices.DeleteFunc(slices.Clone(h.Slots), func(s int) bool { return slices.Contains(sl, s) })
		default:
			keep = h.Slots
		}
		if len(keep) > 0 {
			out = append(out, Host{Name: h.Name, Slots: slices.Clone(keep)})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("launch: %s %q leaves no slot to run on", flag, spec)
	}
	return out, nil
}

// Limit keeps the first numNodes hosts and the first numSlots slots of each
// (a value <= 0 keeps all), as DeepSpeed's --num_nodes and --num_gpus do.
// Asking for more than there are is an error.
func Limit(hosts []Host, numNodes, numSlots int) ([]Host, error) {
	if numNodes > 0 {
		if numNodes > len(hosts) {
			return nil, fmt.Errorf("launch: --num_nodes %d: only %d hosts: %s", numNodes, len(hosts), hostNames(hosts))
		}
		hosts = hosts[:numNodes]
	}
	out := make([]Host, len(hosts))
	for i, h := range hosts {
		out[i] = Host{Name: h.Name, Slots: slices.Clone(h.Slots)}
		if numSlots > 0 {
			if numSlots > len(h.Slots) {
				return nil, fmt.Errorf("launch: --num_gpus %d: host %s has %d slots", numSlots, h.Name, len(h.Slots))
			}
			out[i].Slots = out[i].Slots[:numSlots]
		}
	}
	return out, nil
}

func hostNames(hosts []Host) string {
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Name
	}
	return strings.Join(names, ", ")
}
