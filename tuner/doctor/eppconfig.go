package doctor

import (
	"context"
	"fmt"
)

// eppConfigCheck: the target's EPP config, read as the daemon does,
// parses, holds the plugin and its parameters decode under the profile.
func eppConfigCheck(_ context.Context, e *env) Result {
	if e.eppErr != nil {
		return Result{Name: checkEPPConfig, Status: StatusFail, Detail: e.eppErr.Error(),
			Fix: "point the target at the EPP config (configMap/key or file) holding one prefix-cache-affinity-filter, name it with plugin:, and keep its parameters to the keys the profile accepts (docs/gate.md)"}
	}
	in := e.epp.Instances[0]
	p := in.Params
	return Result{Name: checkEPPConfig, Status: StatusPass,
		Detail: fmt.Sprintf("%s: plugin %s parses under profile %s (maxTTFTPenaltyMs %g, peakPrefillThroughput %g, inFlightLoadProducerName %q)",
			e.epp.Source, in.Name(), e.tuned.Profile.Name, p.MaxTTFTPenaltyMs, p.PeakPrefillThroughput, p.InFlightLoadProducerName)}
}
