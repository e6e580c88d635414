package tensor

import (
	"fmt"
	"strconv"
	"strings"
)

// DeviceKind says where memory lives.
type DeviceKind uint8

// Device kinds.
const (
	KindCPU DeviceKind = iota
	KindCUDA
)

// Device is a place memory and compute live: the host, or CUDA device Index.
type Device struct {
	Kind  DeviceKind
	Index int
}

// CPU is the host.
var CPU = Device{Kind: KindCPU}

// CUDA returns CUDA device i.
func CUDA(i int) Device { return Device{Kind: KindCUDA, Index: i} }

// IsCPU reports whether d is the host.
func (d Device) IsCPU() bool { return d.Kind == KindCPU }

// String is "cpu" or "cuda:N", as torch prints devices.
func (d Device) String() string {
	if d.Kind == KindCUDA {
		return "cuda:" + strconv.Itoa(d.Index)
	}
	return "cpu"
}

// ParseDevice reads "cpu", "cuda" (device 0) or "cuda:N".
func ParseDevice(s string) (Device, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case s == "cpu":
		return CPU, nil
	case s == "cuda":
		return CUDA(0), nil
	case strings.HasPrefix(s, "cuda:"):
		n, err := strconv.Atoi(s[5:])
		if err == nil && n >= 0 {
			return CUDA(n), nil
		}
	}
	return Device{}, fmt.Errorf("unknown device %q: allowed cpu, cuda, cuda:N", s)
}
