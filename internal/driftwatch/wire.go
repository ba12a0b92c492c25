package driftwatch

import (
	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/internal/catalog"
)

// scoresOf is a monitor's evaluation scores as a drift record holds
// them (nil for nil).
func scoresOf(ss []drift.Score) []catalog.Score {
	if ss == nil {
		return nil
	}
	out := make([]catalog.Score, len(ss))
	for i, s := range ss {
		out[i] = catalog.Score{Name: s.Name, Statistic: s.Statistic, PValue: s.PValue, Drifted: s.Drifted}
	}
	return out
}

// streamOf is a monitor's streaming detector state as a drift record
// holds it (nil for nil).
func streamOf(ss []drift.StreamScore) []catalog.StreamScore {
	if ss == nil {
		return nil
	}
	out := make([]catalog.StreamScore, len(ss))
	for i, s := range ss {
		out[i] = catalog.StreamScore{
			Name: s.Name, Upper: s.Upper, Lower: s.Lower, Threshold: s.Threshold,
			Spread: s.Spread, SpreadThreshold: s.SpreadThreshold,
			Alarms: s.Alarms, LastAlarm: s.LastAlarm, Side: string(s.Side),
			AlarmStatistic: s.AlarmStatistic, Holding: s.Holding, Drifted: s.Drifted,
		}
	}
	return out
}
