package gate

import "strings"

// imageTagProfiles maps the llm-d-router release tags that carry the
// prefix-cache-affinity filter to the built-in profile of that build: every
// one of them has the filter at plugin.go@ff37a5592, the router-2026-08 build
// (docs/gate.md). Earlier tags have no such filter.
var imageTagProfiles = map[string]string{
	"v0.9.0-rc.1":  ProfileRouter202608,
	"v0.9.0-rc.2":  ProfileRouter202608,
	"v0.9.0":       ProfileRouter202608,
	"v0.10.0-rc.1": ProfileRouter202608,
	"v0.10.0":      ProfileRouter202608,
}

// ProfileForImageTag returns the built-in profile of the EPP build an image
// tag names, given the tag ("v0.10.0") or a whole image reference
// ("ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"). ok is false for a
// tag that names no known release carrying the filter: a moving tag (main,
// latest), a digest, a fork's tag or a release without the filter.
func ProfileForImageTag(tag string) (name string, ok bool) {
	if i := strings.Index(tag, "@"); i >= 0 {
		return "", false // a digest names no release
	}
	if i := strings.LastIndex(tag, ":"); i >= 0 && !strings.Contains(tag[i+1:], "/") {
		tag = tag[i+1:]
	}
	name, ok = imageTagProfiles[tag]
	return name, ok
}
