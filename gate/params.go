package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// PenaltyMode is how the load gate decides to release a pin.
type PenaltyMode uint8

const (
	// ModeStatic compares the TTFT gap with maxTTFTPenaltyMs (the EPP default).
	ModeStatic PenaltyMode = iota
	// ModeMatchedTokens compares the queue gap in tokens with the cached prefix
	// the request would forfeit, keeping maxTTFTPenaltyMs as a ceiling.
	ModeMatchedTokens
)

// String returns the mode's config spelling.
func (m PenaltyMode) String() string {
	if m == ModeMatchedTokens {
		return "matchedTokens"
	}
	return "static"
}

// ParsePenaltyMode parses a penaltyMode value exactly as the EPP does.
func ParsePenaltyMode(s string) (PenaltyMode, error) {
	switch s {
	case "static":
		return ModeStatic, nil
	case "matchedTokens":
		return ModeMatchedTokens, nil
	}
	return 0, fmt.Errorf("penaltyMode must be %q or %q, got %q", "static", "matchedTokens", s)
}

// TTFTSource is where the load gate reads per-endpoint TTFT from.
type TTFTSource uint8

const (
	// SourcePrefillThroughput estimates TTFT as inFlightTokens / peakPrefillThroughput * 1000.
	SourcePrefillThroughput TTFTSource = iota
	// SourceLatencyPredictor reads the latency predictor's TTFT.
	SourceLatencyPredictor
)

// String returns the source's config spelling.
func (s TTFTSource) String() string {
	if s == SourceLatencyPredictor {
		return "latencyPredictor"
	}
	return "prefillThroughput"
}

// ParseTTFTSource parses a ttftSource value exactly as the EPP does.
func ParseTTFTSource(s string) (TTFTSource, error) {
	switch s {
	case "prefillThroughput":
		return SourcePrefillThroughput, nil
	case "latencyPredictor":
		return SourceLatencyPredictor, nil
	}
	return 0, fmt.Errorf("ttftSource must be %q or %q, got %q", "prefillThroughput", "latencyPredictor", s)
}

// Defaults of the EPP (llm-d router main, Aug 2026).
const (
	DefaultAffinityThreshold     = 0.80
	DefaultMaxTTFTPenaltyMs      = 18000
	DefaultPeakPrefillThroughput = 15928
)

// PPTSource says where a config's peakPrefillThroughput comes from.
type PPTSource uint8

const (
	// PPTDefault means the key is absent and the EPP default applies.
	PPTDefault PPTSource = iota
	// PPTExplicit means the key is set in the parameters.
	PPTExplicit
	// PPTCalibrated means the key is absent and a calibration file is configured; the
	// EPP uses the calibrated value, which the config does not show.
	PPTCalibrated
)

// String returns "default", "explicit" or "calibrated".
func (s PPTSource) String() string {
	switch s {
	case PPTExplicit:
		return "explicit"
	case PPTCalibrated:
		return "calibrated"
	}
	return "default"
}

// Params are a filter instance's parameters as the EPP would decode them.
type Params struct {
	AffinityThreshold                 float64
	ExplorationProbability            float64
	MaxTTFTPenaltyMs                  float64
	TTFTSource                        TTFTSource
	PeakPrefillThroughput             float64
	PenaltyMode                       PenaltyMode
	PrefixMatchInfoProducerName       string
	LatencyPredictionInfoProducerName string
	InFlightLoadProducerName          string
	MaxInFlightRequestsDelta          int64
	MaxTokensInFlightPenalty          int64
	PrefillCalibrationFile            string
	PrefillCalibrationFingerprint     string
	PrefillCalibrationRequired        bool

	// Present is the set of keys the parameters set explicitly.
	Present KeySet
	// Spelling maps each present key to its spelling in the source.
	Spelling map[Key]string

	// pptNull: the key "peakPrefillThroughput", spelled exactly, is JSON null.
	pptNull bool
}

// DefaultParams returns the parameters of a filter configured with no keys.
func DefaultParams() Params {
	return Params{
		AffinityThreshold:     DefaultAffinityThreshold,
		MaxTTFTPenaltyMs:      DefaultMaxTTFTPenaltyMs,
		TTFTSource:            SourcePrefillThroughput,
		PeakPrefillThroughput: DefaultPeakPrefillThroughput,
		PenaltyMode:           ModeStatic,
	}
}

// PPTSource reports where the effective peakPrefillThroughput comes from.
// Without a calibration file, or with the latency predictor as the TTFT
// source (the calibration build then consults no file), it is explicit when
// the key is set. With a calibration file the build (PR #2938,
// calibration.go@17dd1ab57) tells the operator's value from the default by
// the exact key "peakPrefillThroughput" (JSON null counts): any other
// spelling sets the value, but a matching calibration record overrides it.
func (p *Params) PPTSource() PPTSource {
	if p.PrefillCalibrationFile == "" || p.TTFTSource == SourceLatencyPredictor {
		if p.Present.Has(KeyPeakPrefillThroughput) {
			return PPTExplicit
		}
		return PPTDefault
	}
	if p.pptWrittenExactly() {
		return PPTExplicit
	}
	return PPTCalibrated
}

// pptWrittenExactly reports whether the parameters carry the key
// "peakPrefillThroughput" spelled exactly (null included), which is how the
// calibration build decides that the operator chose the value.
func (p *Params) pptWrittenExactly() bool {
	if p.pptNull {
		return true
	}
	if !p.Present.Has(KeyPeakPrefillThroughput) {
		return false
	}
	s, ok := p.Spelling[KeyPeakPrefillThroughput]
	return !ok || s == keyNames[KeyPeakPrefillThroughput] // parameters built in code have no spelling
}

// ParamError is a parameter that the EPP would refuse; Key names it.
type ParamError struct {
	Key string // the key as spelled in the input ("" for the whole object)
	Err error
}

func (e *ParamError) Error() string {
	if e.Key == "" {
		return "parameters: " + e.Err.Error()
	}
	return fmt.Sprintf("parameter %q: %v", e.Key, e.Err)
}

func (e *ParamError) Unwrap() error { return e.Err }

// ErrUnknownKey marks a key the EPP build would reject at startup.
var ErrUnknownKey = errors.New("unknown key")

// ParseParams decodes a filter's parameters (JSON, as the EPP receives them)
// like the EPP does: absent keys keep their defaults, explicit zeros are kept,
// keys match case-insensitively, and keys the profile lacks are rejected. The
// result is then validated against the profile's rules. An empty input or
// JSON null means no parameters.
func ParseParams(raw []byte, prof Profile) (Params, error) {
	p := prof.DefaultParams()
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return p, p.Validate(prof)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return p, &ParamError{Err: fmt.Errorf("malformed JSON: %w", err)}
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return p, &ParamError{Err: fmt.Errorf("must be a mapping, got %v", describeToken(tok))}
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return p, &ParamError{Err: fmt.Errorf("malformed JSON: %w", err)}
		}
		name, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return p, &ParamError{Key: name, Err: fmt.Errorf("malformed value: %w", err)}
		}
		if err := p.set(name, val, prof); err != nil {
			return p, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return p, &ParamError{Err: fmt.Errorf("malformed JSON: %w", err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return p, &ParamError{Err: errors.New("trailing data after the parameters object")}
	}
	return p, p.Validate(prof)
}

func describeToken(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "a list"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

func (p *Params) set(name string, val json.RawMessage, prof Profile) error {
	k, ok := LookupKey(name)
	if !ok {
		return &ParamError{Key: name, Err: fmt.Errorf("%w: the EPP rejects it at startup (profile %s accepts: %s)", ErrUnknownKey, prof.Name, prof.Keys)}
	}
	if !prof.Accepts(k) {
		return &ParamError{Key: name, Err: fmt.Errorf("%w: build profile %s does not accept %s; an EPP of that build would crash-loop on it", ErrUnknownKey, prof.Name, k)}
	}
	if p.Present.Has(k) {
		return &ParamError{Key: name, Err: fmt.Errorf("duplicates key %q (keys match case-insensitively); refusing to guess which one the EPP reads", p.Spelling[k])}
	}
	if string(val) == "null" { // encoding/json leaves the field untouched
		p.pptNull = p.pptNull || name == keyNames[KeyPeakPrefillThroughput]
		return nil
	}
	p.Present = p.Present.With(k)
	if p.Spelling == nil {
		p.Spelling = make(map[Key]string, 4)
	}
	p.Spelling[k] = name
	bad := func(err error) error { return &ParamError{Key: name, Err: err} }
	switch k {
	case KeyAffinityThreshold, KeyExplorationProbability, KeyMaxTTFTPenaltyMs, KeyPeakPrefillThroughput:
		f, err := decodeFloat(val)
		if err != nil {
			return bad(err)
		}
		switch k {
		case KeyAffinityThreshold:
			p.AffinityThreshold = f
		case KeyExplorationProbability:
			p.ExplorationProbability = f
		case KeyMaxTTFTPenaltyMs:
			p.MaxTTFTPenaltyMs = f
		case KeyPeakPrefillThroughput:
			p.PeakPrefillThroughput = f
		}
	case KeyMaxInFlightRequestsDelta, KeyMaxTokensInFlightPenalty:
		n, err := strconv.ParseInt(string(val), 10, 64)
		if err != nil {
			return bad(fmt.Errorf("must be an integer, got %s", truncate(val)))
		}
		if k == KeyMaxTokensInFlightPenalty {
			p.MaxTokensInFlightPenalty = n
		} else {
			p.MaxInFlightRequestsDelta = n
		}
	case KeyPrefillCalibrationRequired:
		switch string(val) {
		case "true":
			p.PrefillCalibrationRequired = true
		case "false":
			p.PrefillCalibrationRequired = false
		default:
			return bad(fmt.Errorf("must be a boolean, got %s", truncate(val)))
		}
	default: // string keys
		var s string
		if err := json.Unmarshal(val, &s); err != nil {
			return bad(fmt.Errorf("must be a string, got %s", truncate(val)))
		}
		switch k {
		case KeyTTFTSource:
			src, err := ParseTTFTSource(s)
			if err != nil {
				return bad(err)
			}
			p.TTFTSource = src
		case KeyPenaltyMode:
			m, err := ParsePenaltyMode(s)
			if err != nil {
				return bad(err)
			}
			p.PenaltyMode = m
		case KeyPrefixMatchInfoProducerName:
			p.PrefixMatchInfoProducerName = s
		case KeyLatencyPredictionInfoProducerName:
			p.LatencyPredictionInfoProducerName = s
		case KeyInFlightLoadProducerName:
			p.InFlightLoadProducerName = s
		case KeyPrefillCalibrationFile:
			p.PrefillCalibrationFile = s
		case KeyPrefillCalibrationFingerprint:
			p.PrefillCalibrationFingerprint = s
		}
	}
	return nil
}

func decodeFloat(val json.RawMessage) (float64, error) {
	if len(val) == 0 || !(val[0] == '-' || (val[0] >= '0' && val[0] <= '9')) {
		return 0, fmt.Errorf("must be a number, got %s", truncate(val))
	}
	f, err := strconv.ParseFloat(string(val), 64)
	if err != nil {
		return 0, fmt.Errorf("must be a finite number, got %s", truncate(val))
	}
	return f, nil
}

func truncate(b []byte) string {
	s := string(b)
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// Validate applies the EPP's startup checks for the build profile.
func (p *Params) Validate(prof Profile) error {
	name := func(k Key) string {
		if s, ok := p.Spelling[k]; ok {
			return s
		}
		return k.String()
	}
	fail := func(k Key, format string, a ...any) error {
		return &ParamError{Key: name(k), Err: fmt.Errorf(format, a...)}
	}
	for _, f := range []struct {
		k Key
		v float64
	}{{KeyAffinityThreshold, p.AffinityThreshold}, {KeyExplorationProbability, p.ExplorationProbability},
		{KeyMaxTTFTPenaltyMs, p.MaxTTFTPenaltyMs}, {KeyPeakPrefillThroughput, p.PeakPrefillThroughput}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fail(f.k, "must be a finite number, got %v", f.v)
		}
	}
	switch prof.Threshold {
	case ThresholdUnitInterval:
		if p.AffinityThreshold < 0 || p.AffinityThreshold > 1 {
			return fail(KeyAffinityThreshold, "must be in [0, 1], got %v", p.AffinityThreshold)
		}
	default:
		if p.AffinityThreshold > 1 {
			return fail(KeyAffinityThreshold, "must be <= 1, got %v", p.AffinityThreshold)
		}
	}
	if p.ExplorationProbability < 0 || p.ExplorationProbability > 1 {
		return fail(KeyExplorationProbability, "must be in [0, 1], got %v", p.ExplorationProbability)
	}
	if p.MaxTTFTPenaltyMs < 0 {
		return fail(KeyMaxTTFTPenaltyMs, "must be >= 0, got %v", p.MaxTTFTPenaltyMs)
	}
	if p.PeakPrefillThroughput < 0 {
		return fail(KeyPeakPrefillThroughput, "must be >= 0, got %v", p.PeakPrefillThroughput)
	}
	if p.TTFTSource == SourcePrefillThroughput && p.MaxTTFTPenaltyMs > 0 && p.PeakPrefillThroughput == 0 && p.PPTSource() != PPTCalibrated {
		return fail(KeyPeakPrefillThroughput, "must be > 0 when ttftSource is prefillThroughput and maxTTFTPenaltyMs > 0")
	}
	if p.PenaltyMode == ModeMatchedTokens && p.TTFTSource == SourceLatencyPredictor {
		return fail(KeyPenaltyMode, "matchedTokens cannot be used with ttftSource latencyPredictor (milliseconds from a model have no token interpretation)")
	}
	if p.MaxInFlightRequestsDelta < 0 {
		return fail(KeyMaxInFlightRequestsDelta, "must be >= 0, got %d", p.MaxInFlightRequestsDelta)
	}
	if p.MaxInFlightRequestsDelta > 0 && p.MaxTTFTPenaltyMs == 0 {
		return fail(KeyMaxInFlightRequestsDelta, "needs maxTTFTPenaltyMs > 0 (the request gate only adds endpoints within the TTFT penalty)")
	}
	if p.MaxTokensInFlightPenalty < 0 {
		return fail(KeyMaxTokensInFlightPenalty, "must be >= 0, got %d", p.MaxTokensInFlightPenalty)
	}
	// The calibration build's applyCalibration (calibration.go@17dd1ab57):
	// required without a file is a startup error unless the operator wrote
	// the throughput or the latency predictor is the source.
	if p.PrefillCalibrationRequired && p.PrefillCalibrationFile == "" && p.TTFTSource == SourcePrefillThroughput && !p.pptWrittenExactly() {
		return fail(KeyPrefillCalibrationRequired, "is set but prefillCalibrationFile is empty; the EPP refuses to start")
	}
	return nil
}

// Settings returns the values that decide, for a build with semantics sem.
func (p *Params) Settings(sem Semantics) Settings {
	return Settings{
		AffinityThreshold:        p.AffinityThreshold,
		ExplorationProbability:   p.ExplorationProbability,
		MaxTTFTPenaltyMs:         p.MaxTTFTPenaltyMs,
		PeakPrefillThroughput:    p.PeakPrefillThroughput,
		Mode:                     p.PenaltyMode,
		Source:                   p.TTFTSource,
		Semantics:                sem,
		MaxTokensInFlightPenalty: p.MaxTokensInFlightPenalty,
	}
}

// Settings are the values that decide a gate decision.
type Settings struct {
	AffinityThreshold      float64
	ExplorationProbability float64
	MaxTTFTPenaltyMs       float64
	PeakPrefillThroughput  float64
	Mode                   PenaltyMode
	Source                 TTFTSource
	Semantics              Semantics
	// MaxTokensInFlightPenalty is the token bar of the token-bar generation
	// (0: off): after the TTFT gate, release iff the fewest in-flight tokens
	// among sticky endpoints exceed the fewest among the others by more.
	MaxTokensInFlightPenalty int64
}

// BarTokens is the token bar the settings' TTFT comparison stands for,
// maxTTFTPenaltyMs × peakPrefillThroughput / 1000: the static bar in static
// mode, the ceiling's bar in matchedTokens mode. 0 means no bar (gate or
// ceiling off) — the number reports show; code that compares bars uses
// HasBar, NoBar and IsNoBar.
//
// With a token bar (the token-bar generation) the bar is that many tokens.
func (s *Settings) BarTokens() float64 {
	if s.MaxTokensInFlightPenalty > 0 {
		return float64(s.MaxTokensInFlightPenalty)
	}
	return s.MaxTTFTPenaltyMs * s.PeakPrefillThroughput / 1000
}

// ReadsThroughput reports whether the settings' decision divides by
// peakPrefillThroughput: the TTFT comparison is on (maxTTFTPenaltyMs > 0)
// and TTFT is estimated from in-flight tokens.
func (s *Settings) ReadsThroughput() bool {
	return s.Source == SourcePrefillThroughput && s.MaxTTFTPenaltyMs > 0
}

// HasBar reports whether the settings have a load bar at all: a TTFT bar
// (maxTTFTPenaltyMs > 0) or a token bar (maxTokensInFlightPenalty > 0).
// Without one the static gate never releases a pin on load.
func (s *Settings) HasBar() bool {
	return s.MaxTTFTPenaltyMs > 0 || s.MaxTokensInFlightPenalty > 0
}

// NoBar is the bar, in tokens, of a gate that has none (+Inf: no gap
// exceeds it). Every bar outside this package that can be "none" uses it.
func NoBar() float64 { return math.Inf(1) }

// IsNoBar reports whether the bar b (tokens) stands for no bar.
func IsNoBar(b float64) bool { return math.IsInf(b, 1) }

// String renders the settings compactly, e.g. "static max=18000ms ppt=15928 thr=0.8".
func (s *Settings) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s max=%sms", s.Mode, strconv.FormatFloat(s.MaxTTFTPenaltyMs, 'g', -1, 64))
	if s.Source == SourceLatencyPredictor {
		b.WriteString(" source=latencyPredictor")
	} else {
		fmt.Fprintf(&b, " ppt=%s", strconv.FormatFloat(s.PeakPrefillThroughput, 'g', -1, 64))
	}
	fmt.Fprintf(&b, " thr=%s", strconv.FormatFloat(s.AffinityThreshold, 'g', -1, 64))
	if s.ExplorationProbability != 0 {
		fmt.Fprintf(&b, " explore=%s", strconv.FormatFloat(s.ExplorationProbability, 'g', -1, 64))
	}
	return b.String()
}
