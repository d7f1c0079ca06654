package prom

import (
	"testing"
	"time"
)

func TestBackoffGrowsWithJitterAndHonoursRetryAfter(t *testing.T) {
	newH := func(r float64) *HTTP {
		h, err := NewHTTP(HTTPConfig{
			Address: "http://127.0.0.1:1",
			Retry:   RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Jitter: 0.2},
			Rand:    func() float64 { return r },
		})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	tests := []struct {
		name       string
		rand       float64
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		{"first retry, no jitter draw", 0.5, 1, 0, 100 * time.Millisecond},
		{"doubles each attempt", 0.5, 3, 0, 400 * time.Millisecond},
		{"jitter low end", 0, 2, 0, 160 * time.Millisecond},
		{"jitter high end", 1, 2, 0, 240 * time.Millisecond},
		{"capped at max backoff", 0.5, 10, 0, time.Second},
		{"longer Retry-After wins", 0.5, 1, 700 * time.Millisecond, 700 * time.Millisecond},
		{"Retry-After capped at max backoff", 0.5, 1, time.Minute, time.Second},
		{"shorter Retry-After ignored", 0.5, 3, 10 * time.Millisecond, 400 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := newH(tc.rand).backoff(tc.attempt, tc.retryAfter); got != tc.want {
				t.Fatalf("backoff = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	tests := map[string]time.Duration{
		"":                              0,
		"3":                             3 * time.Second,
		"-1":                            0,
		"soon":                          0,
		"Sun, 29 Nov 2026 10:00:05 GMT": 5 * time.Second,
		"Sun, 29 Nov 2026 09:00:00 GMT": 0,
	}
	for in, want := range tests {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}
