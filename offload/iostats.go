package offload

import "time"

// IOStats are an NVMeStore's swap I/O since it opened. Busy counts the wall
// time with any read or write in flight, Waited the part of it the
// optimizer step spent blocked on one; 1 - Waited/Busy is the share of the
// swap I/O hidden behind the step's compute.
type IOStats struct {
	ReadBytes, WriteBytes int64
	Busy, Waited          time.Duration
}

// Hidden is 1 - Waited/Busy, or 0 when nothing moved.
func (s IOStats) Hidden() float64 {
	if s.Busy <= 0 {
		return 0
	}
	return max(0, 1-float64(s.Waited)/float64(s.Busy))
}

// Sub is the I/O between an earlier snapshot o and s.
func (s IOStats) Sub(o IOStats) IOStats {
	return IOStats{ReadBytes: s.ReadBytes - o.ReadBytes, WriteBytes: s.WriteBytes - o.WriteBytes,
		Busy: s.Busy - o.Busy, Waited: s.Waited - o.Waited}
}

// IOStats reports the store's swap I/O so far.
func (s *NVMeStore) IOStats() IOStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.eng.Stats()
	return IOStats{ReadBytes: st.ReadBytes, WriteBytes: st.WriteBytes, Busy: st.Busy, Waited: s.waited}
}
