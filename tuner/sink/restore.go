package sink

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/gatetuner/gatetuner/gate"
	"github.com/gatetuner/gatetuner/tuner/eppconfig"
)

// RestoreChanges returns the changes that restore the owned values the
// instances changed by history entry `to` had before it (all owned keys, so
// later changes to those instances are undone too), and that entry. to == 0 means the last
// entry of kind apply. The instances the entry changed must be managed by the
// snapshot's target.
func RestoreChanges(snap *Snapshot, to int) ([]eppconfig.Change, *Entry, error) {
	var en *Entry
	if to == 0 {
		for i := len(snap.State.History) - 1; i >= 0; i-- {
			if snap.State.History[i].Kind == KindApply {
				en = &snap.State.History[i]
				break
			}
		}
		if en == nil {
			return nil, nil, fmt.Errorf("%s: the history holds no apply to roll back (%d entries)", snap.Target, len(snap.State.History))
		}
	} else {
		var ok bool
		if en, ok = snap.State.Entry(to); !ok {
			return nil, nil, fmt.Errorf("%s: no history entry %d (kept: %s)", snap.Target, to, seqList(snap.State.History))
		}
	}
	changes, err := restoreChanges(*en, snap)
	if err != nil {
		return nil, nil, err
	}
	c := *en
	return changes, &c, nil
}

func seqList(h []Entry) string {
	if len(h) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d…%d", h[0].Seq, h[len(h)-1].Seq)
}

// restoreValues builds the change that makes an instance's owned keys hold
// want again (an entry records every owned key): keys in want are set, the
// other owned keys the profile accepts are removed.
func restoreValues(sel eppconfig.Target, want map[string]string, owned []gate.Key, seq int) (eppconfig.Change, error) {
	ch := eppconfig.Change{Target: sel, Set: map[gate.Key]eppconfig.Value{}}
	names := make([]string, 0, len(want)+len(owned))
	for k := range want {
		names = append(names, k)
	}
	for _, k := range owned {
		if _, ok := want[k.String()]; !ok {
			names = append(names, k.String())
		}
	}
	sort.Strings(names)
	for _, name := range names {
		key, ok := gate.LookupKey(name)
		if !ok {
			return ch, fmt.Errorf("%w: history entry %d names unknown key %q", ErrInvalidChange, seq, name)
		}
		raw, ok := want[name]
		if !ok {
			ch.Remove = append(ch.Remove, key)
			continue
		}
		v, isNull, err := valueOf(raw)
		if err != nil {
			return ch, fmt.Errorf("%w: history entry %d, %s: %w", ErrInvalidChange, seq, name, err)
		}
		if isNull {
			// null leaves the EPP default, exactly like an absent key.
			ch.Remove = append(ch.Remove, key)
			continue
		}
		ch.Set[key] = v
	}
	return ch, nil
}

// valueOf converts a JSON value recorded in the history into an edit value.
func valueOf(raw string) (eppconfig.Value, bool, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return eppconfig.Value{}, false, fmt.Errorf("value %q is not JSON: %w", raw, err)
	}
	switch t := x.(type) {
	case nil:
		return eppconfig.Value{}, true, nil
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			return eppconfig.Value{}, false, fmt.Errorf("number %q: %w", raw, err)
		}
		return eppconfig.Number(f), false, nil
	case string:
		return eppconfig.String(t), false, nil
	case bool:
		return eppconfig.Bool(t), false, nil
	}
	return eppconfig.Value{}, false, fmt.Errorf("value %q is not a number, string or boolean", raw)
}
