// Package fleetsim is the gatetuner fleet simulator: N vLLM pods behind an
// llm-d EPP whose prefix-cache-affinity gate is the exact one in package gate.
// It is the ground truth every estimate and recommendation is judged
// against: it emits the metrics a real deployment exposes (OpenMetrics with
// timestamps for a backfill, or a live /metrics), one gate record per
// decision, and the truth those outputs hide (nominal and drain rates,
// saturated windows, distributions, verdicts, and the TTFT users feel).
//
// This package runs the simulation; its parts live in packages named after
// what they hold, each importing only those before it in the data flow:
//
//   - scenario: the scenario schema, its YAML decoding and validation, the
//     export shapes, multi-day scenarios;
//   - scenarios and traces: the built-in scenarios and the traces they
//     replay, embedded;
//   - prefix: the prefix tree every prompt is a path in, and the per-pod
//     block caches over it;
//   - hist: classic Prometheus histograms;
//   - workload: sessions, arrivals and trace replay (and the Mooncake trace
//     reader);
//   - epp: the EPP's producers, gate call, picker, P/D routing and replicas,
//     and the EPP configs it reads its settings from;
//   - engine: the vLLM V1 scheduler and KV cache;
//   - truth: the ground truth, accumulated as the run goes;
//   - export: the metric families, their exposition (OpenMetrics, /metrics)
//     and the gate records;
//   - live: a fleet in real time, its settings from a file or a ConfigMap,
//     playing the EPP's rollouts.
//
// # Model
//
// Workload. Sessions (per scenario class) share prefixes: a system prompt
// drawn from a pool, an optional document (shared from a Zipf-popular pool,
// whose ranking may churn so that new prefixes keep becoming hot, or unique
// per session), then turns whose prompts grow by the previous output and a
// new user message. Session starts arrive as a Poisson process modulated per
// phase (constant, bursts, diurnal); turns follow open-loop think times, so
// the workload does not depend on the fleet or the gate settings. Every
// prompt is a path in a prefix tree of immutable token runs; caches work on
// tree nodes, never on individual tokens.
//
// Engine (one per pod). vLLM V1's scheduler: every step's token budget
// (maxNumBatchedTokens) goes first to one decode token per decoding request,
// then to prefill chunks of running requests in admission order, then to new
// admissions from the FIFO waiting queue (while running < maxNumSeqs and KV
// blocks allow). A step takes stepOverhead + prefill×t_p + decode×t_d, with
// t_p chosen so that a full chunk on an idle engine runs at the nominal rate
// and t_d = decodeCost × t_p; so under load the drain rate is nominal × (1 −
// decode share of the step) and a request's prefill stretches over the steps
// it shares. KV blocks are shared by running requests and a block-level
// prefix cache (capacity = blocks no running request holds, LRU eviction,
// a request's tail evicted first); running out of blocks preempts the most
// recently admitted request (recompute). vLLM's counters and histograms are
// kept as vLLM does: prompt tokens are counted when a request's prefill
// completes, TTFT includes queueing, request histograms are observed at
// finish.
//
// EPP. The approximate prefix producer remembers what it routed where (block
// size >= 64, an LRU per pod, optional match cap), reporting MatchBlocks and
// TotalBlocks = ceil(prompt/blockSize) for every endpoint; the in-flight
// producer charges (TotalBlocks − MatchBlocks) × blockSize uncached tokens to
// the chosen pod, released at the first token (requests at the last), the
// request being scheduled excluded; gate.Decide filters; the picker takes the
// fewest in-flight tokens among the kept endpoints (ties by in-flight
// requests, then order; or by order only with picker least-tokens).
//
// # Using it
//
// Run simulates a scenario (or a range of its phases, with a warm-up) under
// Options: the seed, gate settings per phase (SettingsFor), and the outputs.
// The same seed and options give byte-identical metrics, records and truth.
// Sweep re-runs a scenario for many candidate settings; StaticBars and Best
// help find the best static bar. live.New runs a scenario in real time
// (content compressed by a time-scale factor), serves /metrics, takes its
// settings from an epp.SettingsSource and plays EPP rollouts with Restart.
//
// Exporters. What the engines and the EPP export (names, labels, observation
// rules, series lifecycles, DP topology, EPP replicas, scrape labels) is a
// scenario.ExportShape chosen per scenario or run; docs/exporters.md cites
// every fact it encodes to its upstream source.
//
// The scenario schema, the built-in scenarios, and the truth definitions
// (saturated windows, drain rate, verdicts) are documented in
// scenarios/README.md.
package fleetsim
