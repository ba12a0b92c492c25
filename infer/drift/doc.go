// Package drift detects distribution shift between a model version's
// reference data (normally its training set) and what it sees live. It is
// pure: no I/O, no goroutines, no clock; the agent feeds it rows and
// persists its State.
//
// # Reference
//
// Summarize (or SummarizeColumns) reduces the reference data to a small
// FeatureReference per feature: mean, standard deviation, quantile bin
// edges with the reference's share in each bin, and a sorted seeded sample.
// The trainer writes one per model version (as JSON), so every agent that
// serves the version can judge drift without the training set.
//
// # Detectors
//
//   - PSI, the population stability index over the reference's quantile
//     bins (Siddiqi 2006; Yurdakul 2018);
//   - KS, the two-sample Kolmogorov–Smirnov statistic with its asymptotic
//     p-value (Kolmogorov 1933, Smirnov 1948, Stephens 1970);
//   - Wasserstein1, the earth mover's distance in reference standard
//     deviations (Vallender 1974; Villani 2009).
//
// Each runs per feature and, when Config.Prediction is set, on the model's
// score. KS p-values are corrected across features in each evaluation with
// Benjamini–Hochberg (default) or Bonferroni (see Adjust).

// # Streaming detector
//
// The windowed detectors judge a window of hundreds of rows every
// Config.Every rows, so they need hundreds of rows to see an abrupt shift.
// With Config.Stream set, the Monitor also runs a two-sided CUSUM per
// feature (Page 1954) on every row, on values standardized against the
// reference (normal scores by rank, distribution-free, by default; see
// Scale). Its threshold follows from StreamConfig.ARL, the expected number
// of rows between false alarms for the whole model, through Siegmund's
// approximation of the CUSUM's average run length (see CUSUMThreshold).
// A third, likelihood-ratio side per feature watches the spread, so that a
// minority of rows from another class mixed in is caught too. It catches
// an abrupt 2σ shift in about a dozen rows and a 1σ shift in a few dozen,
// at O(log n) per row and feature. A streaming alarm raises the
// Monitor's alarm at once (Event.Source == SourceStream). An alarm is
// cleared only by the detector that raised it: a streaming alarm once the
// evidence of every side that alarmed has decayed (see CUSUM.Holding), a
// windowed one by the windowed rule below. Monitor.Stream returns each
// feature's CUSUM statistics and the statistic each alarm crossed with.
//
// # Monitor
//
// A Monitor keeps a sliding window of the last Config.Window rows (each
// column also kept sorted, so an evaluation is a linear merge), evaluates
// every Config.Every rows once the window is full, and applies hysteresis:
// it raises an alarm after Config.Consecutive evaluations in a row in which
// some feature crossed Config.Alarm, and clears it at the first evaluation
// where every feature is back on the safe side of Config.Clear. Each
// transition returns an Event. Until its first evaluation that is not
// over, or its first alarm, a monitor has not judged (Monitor.Judged): it
// is warming up, and no alarm does not yet mean no drift.
//
//	m, err := drift.New(ref, drift.Config{
//		Model: "fraud", Version: "v3", Detector: drift.DetectorKS,
//		Stream: &drift.StreamConfig{ARL: 1e6}, // optional: per-row CUSUM
//	})
//	for row := range rows {
//		ev, err := m.Observe(row) // or ObserveFloat32
//		if ev != nil && ev.Kind == drift.EventAlarm {
//			// publish ev to the mesh; the policy owner starts a retrain
//			// (ev.Source says which detector; ev.Stream which features)
//		}
//	}
//	st := m.State() // JSON; drift.Restore(ref, st) resumes it
package drift
