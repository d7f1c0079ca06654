package scenario

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Days returns a copy of sc whose phases are sc's repeated n times, one
// repetition per simulated day, named "d<day>-<phase>" (day from 1), so each
// day's phases are told apart in the truth (Truth.Days pools each day).
// The workload's random streams continue across days: day 2's sessions,
// documents and trace passes are new draws, never a replay of day 1's.
func Days(sc *Scenario, n int) (*Scenario, error) {
	if n < 1 {
		return nil, fmt.Errorf("days of scenario %s: want at least one day, got %d", sc.Name, n)
	}
	if sc.DayPhases > 0 {
		return nil, fmt.Errorf("days of scenario %s: it is already %d days of %d phases", sc.Name, len(sc.Phases)/sc.DayPhases, sc.DayPhases)
	}
	c := sc.Clone()
	one := c.Phases
	c.Phases = make([]Phase, 0, n*len(one))
	for d := 1; d <= n; d++ {
		for _, p := range one {
			p.Mix = append([]float64(nil), p.Mix...)
			p.Parameters = append([]byte(nil), p.Parameters...)
			p.Name = DayPhaseName(d, p.Name)
			c.Phases = append(c.Phases, p)
		}
	}
	c.DayPhases = len(one)
	return c, c.Validate()
}

// DayPhaseName is the name Days gives phase name on day d (from 1).
func DayPhaseName(d int, name string) string { return fmt.Sprintf("d%d-%s", d, name) }

// SplitDayPhase splits a name DayPhaseName made into its day and phase
// name; ok is false for any other name.
func SplitDayPhase(s string) (day int, name string, ok bool) {
	head, name, found := strings.Cut(s, "-")
	if !found || len(head) < 2 || head[0] != 'd' {
		return 0, "", false
	}
	day, err := strconv.Atoi(head[1:])
	if err != nil || day < 1 {
		return 0, "", false
	}
	return day, name, true
}

// DayCount is the number of simulated days (1 for a scenario not made by Days).
func (sc *Scenario) DayCount() int {
	if sc.DayPhases <= 0 {
		return 1
	}
	return len(sc.Phases) / sc.DayPhases
}

// DayDuration is the length of one simulated day.
func (sc *Scenario) DayDuration() time.Duration {
	return sc.Duration() / time.Duration(sc.DayCount())
}
