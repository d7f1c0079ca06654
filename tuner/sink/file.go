package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// SidecarSuffix is appended to a file target's path to name its state file:
// /etc/epp/config.yaml keeps its state in /etc/epp/config.yaml.gatetuner.json.
const SidecarSuffix = ".gatetuner.json"

// SidecarPath returns the state file of a file target.
func SidecarPath(path string) string { return path + SidecarSuffix }

// fileStore keeps a target in a file and its state in a sidecar JSON file.
type fileStore struct {
	target  Target
	path    string // the config file, symlinks resolved
	sidecar string
	opts    Options
	// fault, when set, is asked before each step of an atomic write
	// ("create", "write", "sync", "rename", "syncdir") and fails it with
	// the error it returns (tests inject failures here).
	fault func(step, path string) error
}

func newFileStore(t Target, opts Options) (*fileStore, error) {
	path, err := filepath.Abs(t.File)
	if err != nil {
		return nil, fmt.Errorf("file target %s: %w", t.File, err)
	}
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved
	}
	sidecar := SidecarPath(path)
	if t.StateFile != "" {
		if sidecar, err = filepath.Abs(t.StateFile); err != nil {
			return nil, fmt.Errorf("file target %s: state file %s: %w", t.File, t.StateFile, err)
		}
		if sidecar == path {
			return nil, fmt.Errorf("file target %s: the state file cannot be the config file", t.File)
		}
	}
	return &fileStore{target: t, path: path, sidecar: sidecar, opts: opts}, nil
}

func (s *fileStore) source() string { return s.target.File }

func (s *fileStore) load(context.Context) (*object, error) {
	text, err := os.ReadFile(s.path)
	if err != nil {
		return nil, fmt.Errorf("read EPP config %s: %w", s.target.File, pathless(err))
	}
	side, err := os.ReadFile(s.sidecar)
	var st State
	switch {
	case errors.Is(err, fs.ErrNotExist):
		side = nil
	case err != nil:
		return nil, fmt.Errorf("read gatetuner state %s: %w", s.sidecar, err)
	default:
		if st, err = decodeSidecar(side); err != nil {
			return nil, fmt.Errorf("%w: gatetuner state %s: %w (fix or remove it)", ErrMalformed, s.sidecar, err)
		}
	}
	return &object{text: text, state: st, version: fileVersion(text, side)}, nil
}

func fileVersion(text, side []byte) string {
	return ConfigHash(text) + "+" + ConfigHash(side)
}

// write checks the files still hold base's content, then writes the sidecar
// and the config, each atomically (temporary file, fsync, rename, fsync of
// the directory). The state goes first, and is put back when the config
// write fails: a crash in between leaves at worst a history entry for a write
// that did not happen, never a write without its entry.
func (s *fileStore) write(_ context.Context, base *object, text []byte, st State) (*object, error) {
	cur, err := os.ReadFile(s.path)
	if err != nil {
		return nil, fmt.Errorf("read EPP config %s: %w", s.target.File, pathless(err))
	}
	side, err := os.ReadFile(s.sidecar)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read gatetuner state %s: %w", s.sidecar, err)
	}
	if fileVersion(cur, side) != base.version {
		return nil, errConflict
	}
	newSide, err := encodeSidecar(st, s.opts.HistoryLimit)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(newSide, side) {
		if err := s.atomicWrite(s.sidecar, newSide, 0o644); err != nil {
			return nil, fmt.Errorf("write gatetuner state: %w", err)
		}
	}
	if !bytes.Equal(text, cur) {
		mode := fs.FileMode(0o644)
		if fi, err := os.Stat(s.path); err == nil {
			mode = fi.Mode().Perm()
		}
		if err := s.atomicWrite(s.path, text, mode); err != nil {
			// Put the state back so it does not record a write that did not happen.
			if !bytes.Equal(newSide, side) {
				var rerr error
				if side == nil {
					rerr = os.Remove(s.sidecar)
				} else {
					rerr = s.atomicWrite(s.sidecar, side, 0o644)
				}
				if rerr != nil {
					return nil, fmt.Errorf("write EPP config: %w (and restoring %s failed: %w)", err, s.sidecar, rerr)
				}
			}
			return nil, fmt.Errorf("write EPP config: %w", err)
		}
	}
	st2, err := decodeSidecar(newSide)
	if err != nil {
		return nil, fmt.Errorf("gatetuner state %s after the write: %w", s.sidecar, err)
	}
	return &object{text: bytes.Clone(text), state: st2, version: fileVersion(text, newSide)}, nil
}

// atomicWrite replaces path with data: a temporary file in the same
// directory, fsync, rename over path, fsync of the directory. On failure the
// original is untouched and the temporary file removed.
func (s *fileStore) atomicWrite(path string, data []byte, perm fs.FileMode) (err error) {
	step := func(name string) error {
		if s.fault != nil {
			return s.fault(name, path)
		}
		return nil
	}
	dir := filepath.Dir(path)
	if err := step("create"); err != nil {
		return fmt.Errorf("create temporary file in %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temporary file in %s: %w", dir, err)
	}
	tmpName := tmp.Name()
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	if err := step("write"); err != nil {
		return fmt.Errorf("write %s (its temporary copy): %w", path, pathless(err))
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s (its temporary copy): %w", path, pathless(err))
	}
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s (its temporary copy): %w", path, pathless(err))
	}
	if err := step("sync"); err != nil {
		return fmt.Errorf("fsync %s (its temporary copy): %w", path, pathless(err))
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s (its temporary copy): %w", path, pathless(err))
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s (its temporary copy): %w", path, pathless(err))
	}
	if err := step("rename"); err != nil {
		return fmt.Errorf("replace %s with its temporary copy: %w", path, pathless(err))
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("replace %s with its temporary copy: %w", path, pathless(err))
	}
	if err := step("syncdir"); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

func (s *fileStore) pendingInfo(context.Context, *Pending) error { return nil }

func (s *fileStore) restartStatus(context.Context, *Pending) (bool, time.Time, string, error) {
	return false, time.Time{}, "waiting for the EPP to restart: MarkRestarted records it", nil
}

// restart runs the restart hook; its failure is a failed rollout.
func (s *fileStore) restart(ctx context.Context, _ *object, hash string) (time.Time, error) {
	if err := s.opts.RestartHook(ctx, s.path, hash); err != nil {
		if ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("restart hook: %w", err)
		}
		return time.Time{}, &rolloutError{msg: "restart hook: " + err.Error()}
	}
	return s.opts.Clock.Now().UTC(), nil
}

// event logs what a ConfigMap target would record as an Event.
func (s *fileStore) event(_ context.Context, _ *object, warning bool, reason, _ string, note string) {
	if warning {
		s.opts.Logger.Warn("sink: "+reason, "target", s.target.Name, "note", note)
		return
	}
	s.opts.Logger.Info("sink: "+reason, "target", s.target.Name, "note", note)
}
