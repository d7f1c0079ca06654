package exporter

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// StreamHealth is gatetuner_records_stream_up{target}: one gauge per target
// with a gate-records stream, read from the stream at scrape time (1
// connected, 0 down).
type StreamHealth struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	probes map[string]func() bool
}

func newStreamHealth() *StreamHealth {
	return &StreamHealth{
		desc: prometheus.NewDesc("gatetuner_records_stream_up",
			"1 while the target's gate-records stream is connected, 0 while it is down (docs/holds.md: records-unavailable).",
			[]string{"target"}, nil),
		probes: map[string]func() bool{},
	}
}

// Watch exports target's stream health as up() reports it; a later Watch of
// the same target replaces the probe.
func (s *StreamHealth) Watch(target string, up func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes[target] = up
}

// Forget stops exporting target's stream health.
func (s *StreamHealth) Forget(target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.probes, target)
}

// Describe implements prometheus.Collector.
func (s *StreamHealth) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector.
func (s *StreamHealth) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for target, up := range s.probes {
		v := 0.0
		if up() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, v, target)
	}
}
