// Package gpu reads NVIDIA GPU telemetry through NVML (go-nvml): memory
// used and total, utilization, power, temperature, ECC error counts and
// critical XID errors, where the device exposes them.
//
// go-nvml loads libnvidia-ml.so.1 with dlopen when NVML is initialised,
// not when the program starts, so this package builds and runs on machines
// without a driver: Open then returns a Telemetry that samples nothing and
// says why in Note.
package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Telemetry watches a set of devices. Its methods are not safe for
// concurrent use.
type Telemetry struct {
	lib    nvml.Interface
	devs   []*device
	events nvml.EventSet // nil when no device reports XID events
	note   string
}

type device struct {
	index     int
	h         nvml.Device
	name      string
	uuid      string
	xid       bool     // XID events registered
	xidsSince []uint64 // XIDs seen since the last Sample
}

// Open initialises NVML from lib (nil: the system's libnvidia-ml.so.1)
// and watches the devices with the given NVML indices (none: every
// device). Without a usable driver it returns a Telemetry that is not
// Available, whose Note says why, and a nil error: telemetry is optional.
// The error is for bad arguments only: an index NVML does not have.
func Open(lib nvml.Interface, indices ...int) (*Telemetry, error) {
	if lib == nil {
		lib = nvml.New()
	}
	t := &Telemetry{}
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		t.note = "GPU telemetry off: libnvidia-ml.so.1 (the NVIDIA driver's management library) was not found"
		return t, nil
	default:
		t.note = fmt.Sprintf("GPU telemetry off: NVML did not initialise: %s", errorString(ret))
		return t, nil
	}
	t.lib = lib
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		t.note = "GPU telemetry off: NVML sees no GPU"
		if ret != nvml.SUCCESS {
			t.note += ": " + errorString(ret)
		}
		return t, t.shutdown()
	}
	if len(indices) == 0 {
		for i := range n {
			indices = append(indices, i)
		}
	}
	for _, i := range indices {
		if i < 0 || i >= n {
			err := fmt.Errorf("gpu.Open: device index %d: NVML has devices 0..%d", i, n-1)
			return nil, errors.Join(err, t.shutdown())
		}
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			err := fmt.Errorf("gpu.Open: device %d: %s", i, errorString(ret))
			return nil, errors.Join(err, t.shutdown())
		}
		d := &device{index: i, h: h}
		d.name, _ = h.GetName()
		d.uuid, _ = h.GetUUID()
		t.devs = append(t.devs, d)
	}
	t.watchXIDs()
	return t, nil
}

// watchXIDs registers every device for critical XID events where NVML
// offers them (not on every device or driver); a device without them
// simply reports none.
func (t *Telemetry) watchXIDs() {
	set, ret := t.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return
	}
	for _, d := range t.devs {
		d.xid = d.h.RegisterEvents(uint64(nvml.EventTypeXidCriticalError), set) == nvml.SUCCESS
		if d.xid {
			t.events = set
		}
	}
	if t.events == nil {
		set.Free()
	}
}

// Available reports whether NVML is up and watching at least one device.
func (t *Telemetry) Available() bool { return len(t.devs) > 0 }

// Note says why telemetry is off ("" when it is on), for the engine's notes.
func (t *Telemetry) Note() string { return t.note }

// Close releases the event set and shuts NVML down; a Telemetry that is
// not Available has nothing to release.
func (t *Telemetry) Close() error {
	if t.events != nil {
		t.events.Free()
		t.events = nil
	}
	t.devs = nil
	return t.shutdown()
}

func (t *Telemetry) shutdown() error {
	if t.lib == nil {
		return nil
	}
	lib := t.lib
	t.lib = nil
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: NVML shutdown: %s", errorString(ret))
	}
	return nil
}

// errorString names an NVML return code: the library's message when it is
// loaded (go-nvml's default table otherwise) and the number.
func errorString(r nvml.Return) string {
	return fmt.Sprintf("%s (NVML return %d)", r.String(), int32(r))
}
