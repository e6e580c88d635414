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
	// KindSim is the simulated device (package sim): host memory that Go
	// code may not read or write except through the backend's Copy, so a
	// missed copy fails a test instead of reading host memory silently.
	KindSim
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

// Sim returns simulated device i.
func Sim(i int) Device { return Device{Kind: KindSim, Index: i} }

// IsCPU reports whether d is the host.
func (d Device) IsCPU() bool { return d.Kind == KindCPU }

// String is "cpu", "cuda:N" (as torch prints devices) or "sim:N".
func (d Device) String() string {
	switch d.Kind {
	case KindCUDA:
		return "cuda:" + strconv.Itoa(d.Index)
	case KindSim:
		return "sim:" + strconv.Itoa(d.Index)
	}
	return "cpu"
}

// MarshalText writes the device as String does ("sim:0"), so a report
// that holds one (zero.Memory) reads as a device in JSON.
func (d Device) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads what ParseDevice accepts.
func (d *Device) UnmarshalText(b []byte) error {
	v, err := ParseDevice(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// ParseDevice reads "cpu", "cuda" (device 0), "cuda:N", "sim" (simulated
// device 0) or "sim:N".
func ParseDevice(s string) (Device, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "cpu" {
		return CPU, nil
	}
	for _, k := range []struct {
		name string
		make func(int) Device
	}{{"cuda", CUDA}, {"sim", Sim}} {
		if s == k.name {
			return k.make(0), nil
		}
		if rest, ok := strings.CutPrefix(s, k.name+":"); ok {
			if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
				return k.make(n), nil
			}
		}
	}
	return Device{}, fmt.Errorf("unknown device %q: allowed cpu, cuda, cuda:N, sim, sim:N", s)
}
