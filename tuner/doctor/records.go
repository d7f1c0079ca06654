package doctor

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"
)

// recordsCheck checks the target's records source when it has one: the
// file exists, or the stream answers 200.
func recordsCheck(ctx context.Context, e *env) []Result {
	ct := e.target
	switch {
	case ct.Records.File != "":
		if err := fileReadable(ct.Records.File); err != nil {
			return []Result{{Name: checkRecords, Status: StatusFail, Detail: err.Error(),
				Fix: "records.file must name the gate-records file (JSON lines) the EPP writes (docs/records.md)"}}
		}
		return []Result{{Name: checkRecords, Status: StatusPass, Detail: ct.Records.File + " is readable"}}
	case ct.Records.URL != "":
		if err := streamAnswers(ctx, ct.Records.URL); err != nil {
			return []Result{{Name: checkRecords, Status: StatusFail, Detail: err.Error(),
				Fix: "records.url must be reachable from gatetuner and answer 200 with gate records (docs/records.md)"}}
		}
		return []Result{{Name: checkRecords, Status: StatusPass, Detail: ct.Records.URL + " answers 200"}}
	}
	return nil
}

func fileReadable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// streamAnswers GETs a records stream and checks it answers 200.
func streamAnswers(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("records stream %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("records stream %s: %w", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("records stream %s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}
