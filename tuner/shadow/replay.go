package shadow

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/gatetuner/gatetuner/tuner/records"
)

// Replay reads every record from r through the accumulator, whose settings
// entry 0 is the current settings. When decisions is non-nil, one JSON line
// per record with the current settings' decision is written to it. It
// returns the reader's error: a *records.LineError in strict mode, or an I/O
// failure.
func Replay(r *records.Reader, acc *Accumulator, decisions io.Writer) error {
	var bw *bufio.Writer
	if decisions != nil {
		bw = bufio.NewWriterSize(decisions, 256<<10)
	}
	var line []byte
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		ds := acc.Add(rec.Endpoints)
		if len(ds) == 0 {
			continue
		}
		acc.Observe(&ds[0], rec.Observed.Outcome)
		if bw != nil {
			line = AppendDecisionJSON(line[:0], rec.Line, rec.RequestID, rec.Names, &acc.settings[0], rec.Endpoints, &ds[0])
			if _, err := bw.Write(line); err != nil {
				return fmt.Errorf("write decisions: %w", err)
			}
		}
	}
	if bw != nil {
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("write decisions: %w", err)
		}
	}
	return nil
}
