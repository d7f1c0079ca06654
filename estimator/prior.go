package estimator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
)

// CalibrationSchemaVersion is the llm-d calibration record schema understood.
const CalibrationSchemaVersion = 1

// MinCalibrationSamples is how many valid samples a record needs, as in the EPP.
const MinCalibrationSamples = 10

// CalibrationRecord is the summary the llm-d peak-prefill calibration recipe
// writes (the file the EPP's prefillCalibrationFile points at).
type CalibrationRecord struct {
	SchemaVersion              int      `json:"schema_version"`
	Status                     string   `json:"status"`
	Fingerprint                string   `json:"fingerprint"`
	ModelRevision              string   `json:"model_revision"`
	EngineImageDigest          string   `json:"engine_image_digest"`
	ChunkTokens                *int     `json:"chunk_tokens"`
	ValidSamples               int      `json:"valid_samples"`
	MedianTTFTSeconds          *float64 `json:"median_ttft_seconds"`
	PeakPrefillTokensPerSecond *float64 `json:"peak_prefill_tokens_per_second"`
	Applied                    bool     `json:"applied"`
}

// ParseCalibrationRecord decodes a record; unknown fields are ignored.
func ParseCalibrationRecord(data []byte) (*CalibrationRecord, error) {
	var r CalibrationRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("malformed calibration record: %w", err)
	}
	if dec.More() {
		return nil, errors.New("malformed calibration record: trailing data after the JSON object")
	}
	return &r, nil
}

// Usable explains why the record cannot serve, or returns nil: the same rules
// the EPP applies (schema 1, status OK, a positive finite throughput and
// median TTFT, a chunk size, at least MinCalibrationSamples samples).
func (r *CalibrationRecord) Usable() error {
	if r.SchemaVersion != CalibrationSchemaVersion {
		return fmt.Errorf("schema_version is %d, want %d", r.SchemaVersion, CalibrationSchemaVersion)
	}
	if r.Status != "OK" {
		return fmt.Errorf("status is %q, want \"OK\"", r.Status)
	}
	if r.PeakPrefillTokensPerSecond == nil {
		return errors.New("peak_prefill_tokens_per_second is missing")
	}
	if v := *r.PeakPrefillTokensPerSecond; math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return fmt.Errorf("peak_prefill_tokens_per_second %v is not a positive finite number", v)
	}
	if r.ChunkTokens == nil || *r.ChunkTokens <= 0 {
		return errors.New("chunk_tokens is missing or not positive")
	}
	if r.ValidSamples < MinCalibrationSamples {
		return fmt.Errorf("valid_samples is %d, want at least %d", r.ValidSamples, MinCalibrationSamples)
	}
	if r.MedianTTFTSeconds == nil {
		return errors.New("median_ttft_seconds is missing")
	}
	if v := *r.MedianTTFTSeconds; math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return fmt.Errorf("median_ttft_seconds %v is not a positive finite number", v)
	}
	return nil
}

// Prior turns a usable record into a prior. When fingerprint is non-empty the
// record must carry the same one (a model, TP, chunk or image change makes a
// new fingerprint, and the old measurement must not be reused).
func (r *CalibrationRecord) Prior(fingerprint, source string) (*Prior, error) {
	if err := r.Usable(); err != nil {
		return nil, err
	}
	if fingerprint != "" && r.Fingerprint != fingerprint {
		return nil, fmt.Errorf("record fingerprint %q does not match %q", r.Fingerprint, fingerprint)
	}
	detail := fmt.Sprintf("%s (chunk %d, %d samples, median TTFT %gs)", source, *r.ChunkTokens, r.ValidSamples, *r.MedianTTFTSeconds)
	if r.Fingerprint != "" {
		detail += ", fingerprint " + r.Fingerprint
	}
	return &Prior{Value: *r.PeakPrefillTokensPerSecond, Origin: PriorCalibrationRecord, Detail: detail}, nil
}

// LoadCalibrationPrior reads a calibration record file and returns its prior.
func LoadCalibrationPrior(path, fingerprint string) (*Prior, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read calibration record: %w", err)
	}
	r, err := ParseCalibrationRecord(data)
	if err != nil {
		return nil, fmt.Errorf("calibration record %s: %w", path, err)
	}
	p, err := r.Prior(fingerprint, path)
	if err != nil {
		return nil, fmt.Errorf("calibration record %s: %w", path, err)
	}
	return p, nil
}
