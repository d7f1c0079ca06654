package prom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/model/value"
)

// Defaults applied by StartScraper.
const (
	DefaultScrapeInterval = 15 * time.Second
	// maxScrapeBytes caps one scrape body.
	maxScrapeBytes = 64 << 20
	scrapeAccept   = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
)

// ScrapeTarget is a static scrape job: host:port addresses on one path.
type ScrapeTarget struct {
	// Job is the job label; empty means "scrape".
	Job string
	// Addrs are host:port addresses; each becomes an instance label.
	Addrs []string
	// Labels are added to every series the exposition does not label
	// itself (honor_labels: true).
	Labels map[string]string
	// MetricsPath defaults to /metrics.
	MetricsPath string
}

// ScrapeConfig configures the built-in scraper.
type ScrapeConfig struct {
	Targets []ScrapeTarget
	// Interval between scrapes of one target; zero means DefaultScrapeInterval.
	Interval time.Duration
	// Timeout bounds one scrape; zero means Interval.
	Timeout time.Duration
	// Client does the HTTP requests; defaults to a plain client.
	Client *http.Client
}

// Scraper polls targets and appends their samples to an Embedded TSDB the
// way Prometheus does: stamped with the scrape time unless the exposition
// carries timestamps, with job/instance and target labels (honor_labels),
// plus up and scrape_duration_seconds per target, and staleness markers
// for series that disappear or targets that fail.
type Scraper struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartScraper scrapes every target once right away and then every
// Interval until Stop, ctx's end or Close.
func (e *Embedded) StartScraper(ctx context.Context, cfg ScrapeConfig) (*Scraper, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultScrapeInterval
	}
	if cfg.Timeout <= 0 || cfg.Timeout > cfg.Interval {
		cfg.Timeout = cfg.Interval
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	var loops []*scrapeLoop
	for _, tg := range cfg.Targets {
		if len(tg.Addrs) == 0 {
			return nil, fmt.Errorf("scrape job %q has no addresses", tg.Job)
		}
		for _, addr := range tg.Addrs {
			l, err := e.newScrapeLoop(tg, addr, cfg)
			if err != nil {
				return nil, err
			}
			loops = append(loops, l)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Scraper{cancel: cancel}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		cancel()
		return nil, errors.New("start scraper: embedded TSDB is closed")
	}
	e.scrapers = append(e.scrapers, s)
	e.mu.Unlock()
	for _, l := range loops {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			l.run(ctx, cfg.Interval)
		}()
	}
	return s, nil
}

// Stop ends all scrape loops and waits for them.
func (s *Scraper) Stop() {
	s.cancel()
	s.wg.Wait()
}

// scrapeLoop scrapes one address.
type scrapeLoop struct {
	e       *Embedded
	url     string
	job     string
	inst    string
	extra   map[string]string
	timeout time.Duration
	client  *http.Client
	// prev holds the series the last scrape stamped with scrape time.
	prev map[uint64]labels.Labels
}

func (e *Embedded) newScrapeLoop(tg ScrapeTarget, addr string, cfg ScrapeConfig) (*scrapeLoop, error) {
	if addr == "" || strings.Contains(addr, "/") {
		return nil, fmt.Errorf("scrape address %q: want host:port", addr)
	}
	path := tg.MetricsPath
	if path == "" {
		path = "/metrics"
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	job := tg.Job
	if job == "" {
		job = "scrape"
	}
	extra := map[string]string{"job": job, "instance": addr}
	for k, v := range tg.Labels {
		extra[k] = v
	}
	return &scrapeLoop{e: e, url: "http://" + addr + path, job: job, inst: addr, extra: extra,
		timeout: cfg.Timeout, client: cfg.Client}, nil
}

func (l *scrapeLoop) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		l.scrapeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrapeOnce fetches, parses and appends one scrape; failures are recorded
// as up=0 and logged, like Prometheus.
func (l *scrapeLoop) scrapeOnce(ctx context.Context) {
	ts := l.e.cfg.Now()
	start := time.Now()
	body, ctype, err := l.fetch(ctx)
	if ctx.Err() != nil {
		return // shutting down; write nothing half-done
	}
	app := l.e.Appender(ctx)
	seen := map[uint64]labels.Labels{}
	n := 0
	if err == nil {
		n, err = l.parse(app, body, ctype, ts, seen)
		if err != nil {
			_ = app.Rollback()
			app = l.e.Appender(ctx)
			seen = map[uint64]labels.Labels{}
			n = 0
		}
	}
	if err != nil {
		l.e.cfg.Logger.Warn("scrape failed", "url", l.url, "err", err)
	}
	ms := ts.UnixMilli()
	stale := math.Float64frombits(value.StaleNaN)
	var errs []error
	for h, ls := range l.prev {
		if _, ok := seen[h]; !ok {
			errs = append(errs, app.add(ls, ms, stale))
		}
	}
	l.prev = seen
	up := 1.0
	if err != nil {
		up = 0
	}
	errs = append(errs,
		app.add(l.reportLabels("up"), ms, up),
		app.add(l.reportLabels("scrape_duration_seconds"), ms, time.Since(start).Seconds()),
		app.add(l.reportLabels("scrape_samples_scraped"), ms, float64(n)),
	)
	if err := errors.Join(errs...); err != nil {
		l.e.cfg.Logger.Warn("append scrape report", "url", l.url, "err", err)
	}
	if err := app.Commit(); err != nil {
		l.e.cfg.Logger.Warn("commit scrape", "url", l.url, "err", err)
	}
}

func (l *scrapeLoop) reportLabels(name string) labels.Labels {
	m := map[string]string{labels.MetricName: name}
	for k, v := range l.extra {
		m[k] = v
	}
	return labels.FromMap(m)
}

func (l *scrapeLoop) fetch(ctx context.Context) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.url, nil)
	if err != nil {
		return nil, "", fmt.Errorf("scrape %s: %w", l.url, err)
	}
	req.Header.Set("Accept", scrapeAccept)
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("scrape %s: %w", l.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, "", fmt.Errorf("scrape %s: HTTP %s", l.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxScrapeBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("scrape %s: read body: %w", l.url, err)
	}
	if len(body) > maxScrapeBytes {
		return nil, "", fmt.Errorf("scrape %s: body exceeds %d bytes", l.url, maxScrapeBytes)
	}
	return body, resp.Header.Get("Content-Type"), nil
}

func (l *scrapeLoop) parse(app *Appender, body []byte, ctype string, ts time.Time, seen map[uint64]labels.Labels) (int, error) {
	if len(body) > 0 && body[len(body)-1] != '\n' {
		body = append(body, '\n')
	}
	p, err := textparse.New(body, ctype, labels.NewSymbolTable(), textparse.ParserOptions{FallbackContentType: "text/plain"})
	if p == nil {
		return 0, fmt.Errorf("scrape %s: %w", l.url, err)
	}
	in := ingest{buf: body, parser: p, extra: sortedLabels(l.extra), defaultMs: ts.UnixMilli(), hasDefault: true, seen: seen}
	n, err := in.run(app)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", l.url, err)
	}
	return n, nil
}
