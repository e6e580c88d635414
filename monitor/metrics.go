package monitor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsServer serves Prometheus /metrics for a running job and is a
// Writer: give it to the Monitor (WithWriter) and every step updates it.
type MetricsServer struct {
	srv *http.Server
	ln  net.Listener

	mu       sync.Mutex
	lastStep int
	step     prometheus.Counter
	gauges   map[string]prometheus.Gauge // by tag
	done     chan error
	once     sync.Once
	closeErr error
}

// metricNames maps the tags /metrics exposes to their gauge names and help.
var metricNames = map[string][2]string{
	TagLoss:         {"deepgo_loss", "training loss of the last optimizer step"},
	TagEvalLoss:     {"deepgo_eval_loss", "mean loss of the last evaluation (EvalBatch)"},
	TagLR:           {"deepgo_lr", "learning rate"},
	TagLossScale:    {"deepgo_loss_scale", "loss scale (fp16 only)"},
	TagTokensPerS:   {"deepgo_tokens_per_s", "tokens per second of the last step, all ranks"},
	TagGradNorm:     {"deepgo_grad_norm", "global gradient norm of the last applied step"},
	TagSkippedSteps: {"deepgo_skipped_steps", "optimizer steps skipped for overflow so far"},
	TagStepTime:     {"deepgo_step_time_ms", "wall time of the last optimizer step in ms"},
	TagCommTime:     {"deepgo_comm_time_ms", "collective time of the last step in ms"},
	TagRSS:          {"deepgo_rss_bytes", "resident set size of the process"},
}

// memoryKinds maps the memory tags to deepgo_memory_bytes{kind}.
var memoryKinds = map[string]string{
	TagMemoryHost: "host", TagMemoryDevice: "device", TagMemoryPeak: "peak",
	TagGPUMemoryUsed: "gpu_used", TagGPUMemoryTotal: "gpu_total",
}

// ServeMetrics listens on addr and serves /metrics until Close. A host-less
// addr (":9090") binds 127.0.0.1, so a job's numbers stay on the machine
// unless the address names an interface ("0.0.0.0:9090"). Port 0 picks a
// free port; Addr says which.
func ServeMetrics(addr string) (*MetricsServer, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("monitor: metrics address %q: want host:port or :port: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("monitor: metrics address %q: %w", addr, err)
	}
	reg := prometheus.NewRegistry()
	s := &MetricsServer{ln: ln, gauges: map[string]prometheus.Gauge{}, done: make(chan error, 1)}
	s.step = prometheus.NewCounter(prometheus.CounterOpts{Name: "deepgo_step", Help: "optimizer steps reported (the global step)"})
	reg.MustRegister(s.step)
	for tag, nh := range metricNames {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: nh[0], Help: nh[1]})
		reg.MustRegister(g)
		s.gauges[tag] = g
	}
	mem := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "deepgo_memory_bytes", Help: "memory by kind: the engine's host, device and peak accounting, and GPU telemetry"}, []string{"kind"})
	reg.MustRegister(mem)
	for tag, kind := range memoryKinds {
		s.gauges[tag] = mem.WithLabelValues(kind)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on.
func (s *MetricsServer) Addr() string { return s.ln.Addr().String() }

// WriteEvents updates the gauges and advances deepgo_step to step.
func (s *MetricsServer) WriteEvents(step int, events []Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if step > s.lastStep {
		s.step.Add(float64(step - s.lastStep))
		s.lastStep = step
	}
	for _, e := range events {
		if g, ok := s.gauges[e.Tag]; ok {
			g.Set(e.Value)
		}
	}
	return nil
}

// Close stops serving; later calls return the first one's result.
func (s *MetricsServer) Close() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := s.srv.Shutdown(ctx)
		if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		s.closeErr = err
	})
	return s.closeErr
}
