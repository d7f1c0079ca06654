package eppconfig

import (
	"encoding/json"
	"slices"
)

// Roles of the scheduling profile(s) a P/D config references an instance
// from (PD.Gate): the estimator's pdGateProfile values, and both.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
	RoleBoth    = "both"
)

// PD is where a config puts a filter instance in a prefill/decode setup.
type PD struct {
	// Handler is the P/D profile handler plugin's type ("" when none).
	Handler string
	// Prefill and Decode name the handler's profiles.
	Prefill, Decode string
	// Gate is the role of the profile(s) referencing the instance:
	// RolePrefill, RoleDecode, RoleBoth, or "" (no handler, or neither).
	Gate string
	// Profiles are the scheduling profiles that reference the instance.
	Profiles []string
}

// PD reads the config's P/D profile handler (llm-d-router's
// disagg-profile-handler, or its deprecated pd-profile-handler alias) and
// which of its profiles references the instance. The profile names default
// to "prefill" and "decode" and are set by profiles.{prefill,decode}, or
// the deprecated prefillProfile / decodeProfile (disagg_profile_handler.go).
func (in Instance) PD() PD {
	pc := PD{Prefill: RolePrefill, Decode: RoleDecode, Profiles: in.Profiles()}
	for _, p := range in.Config.Plugins {
		if p.Type != "disagg-profile-handler" && p.Type != "pd-profile-handler" {
			continue
		}
		pc.Handler = p.Type
		pc.handlerProfiles(p.Parameters)
	}
	inPrefill, inDecode := slices.Contains(pc.Profiles, pc.Prefill), slices.Contains(pc.Profiles, pc.Decode)
	switch {
	case pc.Handler == "":
	case inPrefill && inDecode:
		pc.Gate = RoleBoth
	case inPrefill:
		pc.Gate = RolePrefill
	case inDecode:
		pc.Gate = RoleDecode
	}
	return pc
}

// handlerProfiles sets the profile names a handler's parameters give: the
// profiles.{prefill,decode} keys before the deprecated ones.
func (pc *PD) handlerProfiles(raw json.RawMessage) {
	var params struct {
		Profiles struct {
			Prefill string `json:"prefill"`
			Decode  string `json:"decode"`
		} `json:"profiles"`
		PrefillProfile string `json:"prefillProfile"`
		DecodeProfile  string `json:"decodeProfile"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &params) != nil {
		return
	}
	for _, v := range []struct {
		dst      *string
		new, old string
	}{{&pc.Prefill, params.Profiles.Prefill, params.PrefillProfile},
		{&pc.Decode, params.Profiles.Decode, params.DecodeProfile}} {
		switch {
		case v.new != "":
			*v.dst = v.new
		case v.old != "":
			*v.dst = v.old
		}
	}
}
