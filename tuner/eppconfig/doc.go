// Package eppconfig reads and edits the llm-d EPP's EndpointPickerConfig
// without losing a byte the user had.
//
// Parse accepts a YAML stream holding EndpointPickerConfig documents, or
// the forms that embed them as strings: ConfigMap data values (chart style),
// Helm values files (router.epp.pluginsCustomConfig and the older
// inferenceExtension.pluginsCustomConfig, with pluginsConfigFile naming the
// one in use), a Flux HelmRelease's spec.values, an Argo CD Application's
// helm.values string or valuesObject, and any of these in a kind: List. It
// finds the prefix-cache-affinity-filter instances, and
// gives each one's parameters as the EPP decodes them: the config text goes
// through the EPP's own YAML-to-JSON conversion (sigs.k8s.io/yaml, strict)
// and the parameters through gate.ParseParams for a build profile.
//
// Edit never re-encodes. It splices the original bytes at the positions the
// yaml.v3 parse gives: a changed value replaces exactly the bytes of its
// scalar, a new key is a new line after the last parameter (inside the braces
// of a flow mapping), a missing parameters block goes under the plugin entry,
// a removed key takes only its own line. Inside an embedding the edit is made
// on the config text and mapped back through the indentation of each literal
// block scalar that holds it (two for an Application's values string). A
// config in a double-quoted string (toYaml, kubectl -o yaml) is edited inside
// the string: each change's ends are mapped to the bytes of the escapes and
// line folds that produce them, the new text is written escaped, and the
// value must read back as exactly the intended text; a single-quoted or
// folded value is read but never re-encoded.
// The result is parsed again and compared with the original, document by
// document and as the EPP reads it; any difference beyond the intended change,
// or parameters the target's EPP build would reject, refuses the edit.
//
// Every error is a one-line *Error naming the source, line, data key and
// plugin, wrapping one of the package's sentinel errors or a *gate.ParamError.
package eppconfig
