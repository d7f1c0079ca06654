package config

import "testing"

// TestLoadFillsThePrometheusDefaults pins DefaultPrometheus (the CLI's flag
// defaults) to what Load fills into a prometheus: section that sets nothing.
func TestLoadFillsThePrometheusDefaults(t *testing.T) {
	c, err := load(t, "prometheus: {url: http://prom:9090}\ntargets:\n- name: a\n  file: /tmp/epp.yaml\n  selector: {vllm: 'pod=~\"a.*\"'}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultPrometheus()
	if c.Prometheus.Timeout != want.Timeout || c.Prometheus.ScrapeInterval != want.ScrapeInterval {
		t.Errorf("Load filled timeout %v, scrapeInterval %v; DefaultPrometheus says %v, %v",
			c.Prometheus.Timeout, c.Prometheus.ScrapeInterval, want.Timeout, want.ScrapeInterval)
	}
}
