package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
	"github.com/gatetuner/gatetuner/tuner/records"
	"github.com/gatetuner/gatetuner/tuner/shadow"
)

func init() { commands = append(commands, newShadowCmd) }

type shadowOpts struct {
	records, eppConfig, plugin, key, target, profile string
	ppt                                              float64
	sweep                                            []string
	output, decisionsOut                             string
	strict                                           bool
}

func newShadowCmd(a *app) *cobra.Command {
	var o shadowOpts
	cmd := &cobra.Command{
		Use:   "shadow --records FILE|- --epp-config FILE [flags]",
		Short: "Replay recorded gate decisions through the exact gate for the current and candidate settings",
		Long: `shadow replays gate records (JSON lines, docs/records.md) through the EPP's
prefix-cache-affinity filter configured as in an EndpointPickerConfig (or a ConfigMap
holding one), and prints what it did: outcomes, verdicts against the per-decision
break-even, wrongly-held and forfeited rates, excess cost, where the gate input sits
against the bar, and agreement with what the live EPP recorded. --sweep evaluates a
product of candidate settings in the same pass.

Exit codes (docs/cli.md): 0 done (bad lines tolerated and reported), 1 a --strict
stop or an I/O failure mid-run, 2 a usage or config error before reading, 3 no
usable record (the input is empty, every line is bad, or every record was skipped).`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error { return runShadow(a, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.records, "records", "", "gate records file (JSON lines, gzip detected), or - for stdin")
	f.StringVar(&o.eppConfig, "epp-config", "", "EndpointPickerConfig YAML, or a ConfigMap manifest holding one")
	f.StringVar(&o.plugin, "plugin", "", "filter instance name (required when the config has several); also skips records of other instances")
	f.StringVar(&o.key, "configmap-key", "", "ConfigMap data key holding the config (when several do)")
	f.StringVar(&o.target, "target", "", "skip records whose target names another deployment")
	f.StringVar(&o.profile, "profile", gate.DefaultProfileName, "EPP build profile: "+fmt.Sprint(gate.ProfileNames()))
	f.Float64Var(&o.ppt, "ppt", 0, "tok/s used to express excess cost in seconds (default: the config's peakPrefillThroughput); the value of a calibrated throughput")
	f.StringArrayVar(&o.sweep, "sweep", nil, "evaluate candidate settings: key=v1,v2 (repeatable; several keys form a product)")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.decisionsOut, "decisions-out", "", "write one JSON line per decision to this file")
	f.BoolVar(&o.strict, "strict", false, "stop at the first bad record line (exit 1)")
	return cmd
}

func runShadow(a *app, o *shadowOpts) error {
	// Everything that can be wrong with the invocation is checked before reading.
	switch {
	case o.records == "":
		return usageErr("--records is required (a file, or - for stdin)")
	case o.eppConfig == "":
		return usageErr("--epp-config is required (an EndpointPickerConfig or a ConfigMap manifest)")
	case o.output != "text" && o.output != "json":
		return usageErr("--output must be text or json, got %q", o.output)
	case o.ppt < 0:
		return usageErr("--ppt must be > 0, got %v", o.ppt)
	}
	prof, err := gate.LookupProfile(o.profile)
	if err != nil {
		return asUsage(fmt.Errorf("--profile: %w", err))
	}
	inst, params, err := loadFilter(o.eppConfig, o.plugin, o.key, prof)
	if err != nil {
		return asUsage(err)
	}
	report := shadow.SettingsReport{Source: o.eppConfig, Plugin: inst.Plugin.Name, Target: o.target, Profile: prof.Name, Semantics: prof.MissingSignal.String()}
	current, secondsAt, err := o.currentSettings(inst, params, prof, &report)
	if err != nil {
		return err
	}
	sweep, err := shadow.ParseSweep(o.sweep)
	if err != nil {
		return asUsage(err)
	}
	base := params
	base.PeakPrefillThroughput = current.PeakPrefillThroughput
	candidates, err := sweep.Expand(base, prof)
	if err != nil {
		return asUsage(err)
	}
	settings := []gate.Settings{current}
	for _, c := range candidates {
		settings = append(settings, c.Settings)
	}
	acc := shadow.NewAccumulator(settings, secondsAt)
	rd, err := o.replay(a, acc)
	if err != nil {
		return err
	}
	st := rd.Stats()
	sum := shadow.Summary{Records: shadow.RecordStats{Read: st.Read, Bad: st.Bad, Skipped: st.Skipped}, Settings: report}
	sum.Settings.SettingsBrief = shadow.Brief(current)
	for _, bl := range rd.BadLines() {
		sum.BadLines = append(sum.BadLines, shadow.BadLine{Line: bl.Line, Reason: bl.Reason})
	}
	sum.Fill(acc, candidates, secondsAt)
	if params.MaxInFlightRequestsDelta > 0 {
		sum.Caveats = append(sum.Caveats, fmt.Sprintf("maxInFlightRequestsDelta=%d: the request-count gate is not modelled; decisions it changed show as disagreement", params.MaxInFlightRequestsDelta))
	}
	if o.output == "json" {
		err = sum.WriteJSON(a.stdout)
	} else {
		err = sum.WriteText(a.stdout)
	}
	if err != nil {
		return err
	}
	if st.Read == 0 {
		name := o.records
		if name == "-" {
			name = "stdin"
		}
		return nothingErr("%s: no usable record: %d bad lines, %d skipped by --target/--plugin", name, st.Bad, st.Skipped)
	}
	return nil
}

// currentSettings are the instance's settings with --ppt standing in for
// a calibrated throughput, and the throughput excess cost is expressed in
// seconds at (0: none); report says where the throughput comes from.
func (o *shadowOpts) currentSettings(inst eppconfig.Instance, params gate.Params, prof gate.Profile, report *shadow.SettingsReport) (gate.Settings, float64, error) {
	current := params.Settings(prof.MissingSignal)
	secondsAt := o.ppt
	switch params.PPTSource() {
	case gate.PPTCalibrated:
		if o.ppt > 0 {
			current.PeakPrefillThroughput = o.ppt
			report.PPTSource = "calibrated+flag"
		} else if current.ReadsThroughput() {
			return current, 0, usageErr("%s: plugin %q: peakPrefillThroughput comes from calibration file %q and its value is not in the config; pass --ppt with the calibrated value",
				o.eppConfig, inst.Plugin.Name, params.PrefillCalibrationFile)
		}
	case gate.PPTExplicit:
		report.PPTSource = "config"
	default:
		report.PPTSource = "default"
	}
	if o.ppt > 0 && params.PPTSource() != gate.PPTCalibrated {
		report.PPTSource = "flag"
	}
	if secondsAt == 0 && params.PPTSource() != gate.PPTCalibrated {
		secondsAt = current.PeakPrefillThroughput
	}
	if secondsAt > 0 {
		report.SecondsAt = &secondsAt
	} else {
		report.PPTSource = ""
	}
	return current, secondsAt, nil
}

// replay reads the records (--records, - for stdin) into acc, writing each
// decision to --decisions-out when given (atomically: all or nothing).
func (o *shadowOpts) replay(a *app, acc *shadow.Accumulator) (*records.Reader, error) {
	in := a.stdin
	if o.records != "-" {
		fh, err := os.Open(o.records)
		if err != nil {
			return nil, usageErr("--records: %v", err)
		}
		defer fh.Close()
		in = fh // gzip is detected by its magic bytes (records.NewReader)
	}
	var out *atomicFile
	if o.decisionsOut != "" {
		var err error
		if out, err = createAtomic(o.decisionsOut); err != nil {
			return nil, usageErr("--decisions-out: %v", err)
		}
		defer out.Abort()
	}
	rd := records.NewReader(in, records.Options{Strict: o.strict, Target: o.target, Plugin: o.plugin})
	var w io.Writer
	if out != nil {
		w = out
	}
	if err := shadow.Replay(rd, acc, w); err != nil {
		var le *records.LineError
		if errors.As(err, &le) {
			return nil, &exitError{code: 1, err: fmt.Errorf("%s: %w (--strict)", o.records, le)}
		}
		return nil, &exitError{code: 1, err: fmt.Errorf("%s: %w", o.records, err)}
	}
	if out != nil {
		if err := out.Commit(); err != nil {
			return nil, &exitError{code: 1, err: fmt.Errorf("--decisions-out: %w", err)}
		}
	}
	return rd, nil
}

// loadFilter reads an EPP config file and returns the selected filter
// instance and its parameters under the profile.
func loadFilter(path, plugin, key string, prof gate.Profile) (eppconfig.Instance, gate.Params, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return eppconfig.Instance{}, gate.Params{}, fmt.Errorf("read EPP config: %w", err)
	}
	f, err := eppconfig.Parse(data, path)
	if err != nil {
		return eppconfig.Instance{}, gate.Params{}, err
	}
	in, err := f.Select(eppconfig.Target{Plugin: plugin, DataKey: key})
	if err != nil {
		return eppconfig.Instance{}, gate.Params{}, err
	}
	params, err := in.Params(prof)
	if err != nil {
		return eppconfig.Instance{}, gate.Params{}, err
	}
	return in, params, nil
}

// atomicFile is written under a temporary name and renamed on Commit;
// Abort (or a failure) removes it, so nothing partial is left behind.
type atomicFile struct {
	*os.File
	path string
	done bool
}

func createAtomic(path string) (*atomicFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	return &atomicFile{File: f, path: path}, nil
}

// Write writes to the temporary file; its errors name the path the user gave.
func (f *atomicFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.named(err)
}

// Commit syncs, closes and renames the file into place.
func (f *atomicFile) Commit() error {
	if err := f.Sync(); err != nil {
		return f.named(err)
	}
	if err := f.Close(); err != nil {
		return f.named(err)
	}
	if err := os.Rename(f.Name(), f.path); err != nil {
		return f.named(err)
	}
	f.done = true
	return nil
}

// named rewrites an error about the temporary file to name f.path.
func (f *atomicFile) named(err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		return fmt.Errorf("%s %s: %w", pe.Op, f.path, pe.Err)
	case errors.As(err, &le):
		return fmt.Errorf("%s %s: %w", le.Op, f.path, le.Err)
	}
	return fmt.Errorf("%s: %w", f.path, err)
}

// Abort removes the temporary file unless it was committed.
func (f *atomicFile) Abort() {
	if f.done {
		return
	}
	f.Close()
	os.Remove(f.Name())
}
