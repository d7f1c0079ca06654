package tuner

import "github.com/gatetuner/gatetuner/tuner/source"

// Decision source kinds, as reported in evidence and metrics (package source).
const (
	SourceKindRecords = source.KindRecords
	SourceKindModel   = source.KindModel
)

// The decision sources live in package source; these names keep the
// tuner's API.
type (
	// Decision is one decision's input, as a source yields it.
	Decision = source.Decision
	// DecisionSource yields the decisions of a shadow window.
	DecisionSource = source.DecisionSource
	// RecordsFile is an exact source: gate records re-read from a file.
	RecordsFile = source.RecordsFile
	// RecordsStream is an exact source fed by an HTTP(S) records stream.
	RecordsStream = source.RecordsStream
	// Model is the Prometheus-model source.
	Model = source.Model
)

// ErrModelData is returned when the estimates lack what the model needs.
var ErrModelData = source.ErrModelData

// The resumable sources' names (package source).
type (
	// Mark is where a resumable source stopped.
	Mark = source.Mark
	// Resumer is a decision source a later cycle can resume.
	Resumer = source.Resumer
)
