package spans

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"strings"

	"github.com/gatetuner/gatetuner/gate"
)

// RecordSize is the size of a Record in memory and of its encoding.
const RecordSize = 48

// Record is the fixed-size stored form of a GateSpan (RecordSize bytes).
// Strings and the threshold are indexes into the window's Tables; the
// request id is kept as a hash, the trace id as its last 8 bytes, and the
// span id not at all.
type Record struct {
	EndNano int64
	// TraceLo is the last 8 bytes of the trace id (big-endian), the part
	// a W3C trace id keeps random.
	TraceLo uint64
	// RequestHash is FNV-1a 64 of gen_ai.request.id (FlagRequestID).
	RequestHash uint64
	// PenaltyMs is ttft_penalty_ms (FlagPenalty).
	PenaltyMs float64
	// DurationNano is end − start, saturated at 2³²−1.
	DurationNano uint32
	Candidates   uint16
	Sticky       uint16
	// Threshold, Model and Pod index the Tables; NoIndex when a table was full.
	Threshold, Model, Pod uint16
	Outcome               gate.Outcome
	Flags                 Flags
}

// NoIndex marks a table index that could not be assigned (a full table).
const NoIndex = math.MaxUint16

// Flags says which optional fields a Record holds.
type Flags uint8

// Record flags.
const (
	FlagSticky Flags = 1 << iota
	FlagPenalty
	FlagModel
	FlagRequestID
)

// Has reports whether every flag of g is set.
func (f Flags) Has(g Flags) bool { return f&g == g }

// HasPenalty reports whether the record carries ttft_penalty_ms.
func (r *Record) HasPenalty() bool { return r.Flags.Has(FlagPenalty) }

// HasSticky reports whether the record carries sticky_endpoints.
func (r *Record) HasSticky() bool { return r.Flags.Has(FlagSticky) }

// GateRan reports whether the load gate compared a penalty.
func (r *Record) GateRan() bool { return r.HasPenalty() }

// HashRequestID is the RequestHash of a request id.
func HashRequestID(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

// Outcome codes on disk: stable, independent of gate's enum order.
var diskOutcomes = [...]string{"not_applicable", "exploration", "no_match", "sticky", "load_override",
	"missing_signal", "request_load_override"}

const diskOther = 0xFF

func outcomeCode(o gate.Outcome) byte {
	name := OutcomeName(o)
	for i, n := range diskOutcomes {
		if n == name {
			return byte(i)
		}
	}
	return diskOther
}

func outcomeOfCode(b byte) gate.Outcome {
	if int(b) < len(diskOutcomes) {
		return parseDecision(diskOutcomes[b])
	}
	return OutcomeOther
}

// AppendBinary appends the record's RecordSize-byte little-endian encoding.
func (r *Record) AppendBinary(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(r.EndNano))
	b = binary.LittleEndian.AppendUint64(b, r.TraceLo)
	b = binary.LittleEndian.AppendUint64(b, r.RequestHash)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.PenaltyMs))
	b = binary.LittleEndian.AppendUint32(b, r.DurationNano)
	b = binary.LittleEndian.AppendUint16(b, r.Candidates)
	b = binary.LittleEndian.AppendUint16(b, r.Sticky)
	b = binary.LittleEndian.AppendUint16(b, r.Threshold)
	b = binary.LittleEndian.AppendUint16(b, r.Model)
	b = binary.LittleEndian.AppendUint16(b, r.Pod)
	return append(b, outcomeCode(r.Outcome), byte(r.Flags))
}

// DecodeRecord decodes AppendBinary's encoding; b must hold RecordSize bytes.
func DecodeRecord(b []byte) Record {
	_ = b[RecordSize-1]
	le := binary.LittleEndian
	return Record{
		EndNano:      int64(le.Uint64(b[0:])),
		TraceLo:      le.Uint64(b[8:]),
		RequestHash:  le.Uint64(b[16:]),
		PenaltyMs:    math.Float64frombits(le.Uint64(b[24:])),
		DurationNano: le.Uint32(b[32:]),
		Candidates:   le.Uint16(b[36:]),
		Sticky:       le.Uint16(b[38:]),
		Threshold:    le.Uint16(b[40:]),
		Model:        le.Uint16(b[42:]),
		Pod:          le.Uint16(b[44:]),
		Outcome:      outcomeOfCode(b[46]),
		Flags:        Flags(b[47]),
	}
}

// Table names one of a window's interned tables.
type Table uint8

// Tables of a window.
const (
	TableThreshold Table = iota
	TableModel
	TablePod
	NumTables
)

// Tables are a window's interned values; a Record's Threshold, Model and
// Pod fields index them. Tables only grow, so a copy of the slice headers
// is a consistent snapshot.
type Tables struct {
	Thresholds []float64
	Models     []string
	Pods       []string
}

// Threshold returns the record's affinityThreshold (NaN for NoIndex).
func (t *Tables) Threshold(r *Record) float64 {
	if int(r.Threshold) < len(t.Thresholds) {
		return t.Thresholds[r.Threshold]
	}
	return math.NaN()
}

// Model returns the record's gen_ai.request.model ("" when absent).
func (t *Tables) Model(r *Record) string {
	if r.Flags.Has(FlagModel) && int(r.Model) < len(t.Models) {
		return t.Models[r.Model]
	}
	return ""
}

// Pod returns the record's k8s.pod.name.
func (t *Tables) Pod(r *Record) string {
	if int(r.Pod) < len(t.Pods) {
		return t.Pods[r.Pod]
	}
	return ""
}

// Interner assigns table indexes. It is not safe for concurrent use.
type Interner struct {
	Tables
	thr    map[uint64]uint16
	models map[string]uint16
	pods   map[string]uint16
}

// NewInterner returns an empty interner.
func NewInterner() *Interner {
	return &Interner{thr: map[uint64]uint16{}, models: map[string]uint16{}, pods: map[string]uint16{}}
}

// Define sets entry i of table t, as read back from disk; entries must come
// in index order (a gap or a clash returns false).
func (in *Interner) Define(t Table, i uint16, s string, f float64) bool {
	switch t {
	case TableThreshold:
		return defineEntry(&in.Thresholds, in.thr, i, math.Float64bits(f), f)
	case TableModel:
		return defineEntry(&in.Models, in.models, i, s, s)
	case TablePod:
		return defineEntry(&in.Pods, in.pods, i, s, s)
	}
	return false
}

func defineEntry[K comparable, V comparable](vals *[]V, idx map[K]uint16, i uint16, k K, v V) bool {
	if int(i) < len(*vals) {
		return (*vals)[i] == v || (v != v && (*vals)[i] != (*vals)[i]) // NaN thresholds compare by bits
	}
	if int(i) != len(*vals) || i == NoIndex {
		return false
	}
	*vals = append(*vals, v)
	idx[k] = i
	return true
}

// Record converts gs, interning its strings and threshold. added reports
// which tables gained an entry (bit 1<<Table), for the caller to persist.
func (in *Interner) Record(gs *GateSpan) (r Record, added uint8) {
	r = Record{
		EndNano:    gs.EndNano,
		TraceLo:    binary.BigEndian.Uint64(gs.TraceID[8:]),
		PenaltyMs:  gs.PenaltyMs,
		Candidates: uint16(gs.Candidates),
		Sticky:     uint16(gs.Sticky),
		Outcome:    gs.Outcome,
	}
	if d := gs.EndNano - gs.StartNano; d > math.MaxUint32 {
		r.DurationNano = math.MaxUint32
	} else {
		r.DurationNano = uint32(d)
	}
	if gs.HasSticky {
		r.Flags |= FlagSticky
	}
	if gs.HasPenalty {
		r.Flags |= FlagPenalty
	}
	if gs.RequestID != "" {
		r.Flags |= FlagRequestID
		r.RequestHash = HashRequestID(gs.RequestID)
	}
	var a bool
	r.Threshold, a = intern(&in.Thresholds, in.thr, math.Float64bits(gs.Threshold), gs.Threshold)
	added |= bit(a, TableThreshold)
	if gs.Model != "" {
		r.Flags |= FlagModel
		r.Model, a = internString(&in.Models, in.models, gs.Model)
		added |= bit(a, TableModel)
	}
	r.Pod, a = internString(&in.Pods, in.pods, gs.Resource.Pod)
	added |= bit(a, TablePod)
	return r, added
}

// internString interns a copy of s, so that the table keeps no decoded
// message alive.
func internString(vals *[]string, idx map[string]uint16, s string) (uint16, bool) {
	if i, ok := idx[s]; ok {
		return i, false
	}
	return intern(vals, idx, strings.Clone(s), strings.Clone(s))
}

func bit(b bool, t Table) uint8 {
	if b {
		return 1 << t
	}
	return 0
}

// intern returns k's index, adding v when new; NoIndex when the table is full.
func intern[K comparable, V any](vals *[]V, idx map[K]uint16, k K, v V) (uint16, bool) {
	if i, ok := idx[k]; ok {
		return i, false
	}
	if len(*vals) >= NoIndex {
		return NoIndex, false
	}
	i := uint16(len(*vals))
	*vals = append(*vals, v)
	idx[k] = i
	return i, true
}
