package agent

// policies returns every applied policy that decodes (the others are
// counted by the catalog and logged once).
func (a *Agent) policies() []PolicyRecord {
	out, err := a.cat.Policies.Values()
	a.decodeErrors(err)
	return out
}

// placements returns every placement record, by key.
func (a *Agent) placements() map[string]PlacementRecord {
	recs, err := a.cat.Placements.Values()
	a.decodeErrors(err)
	out := make(map[string]PlacementRecord, len(recs))
	for _, p := range recs {
		out[p.Key] = p
	}
	return out
}

// decodeErrors logs each catalog record that does not decode, once per
// record version (the catalog counts them in a metric).
func (a *Agent) decodeErrors(err error) {
	if err == nil {
		return
	}
	a.decodeMu.Lock()
	defer a.decodeMu.Unlock()
	if a.decodeSeen == nil {
		a.decodeSeen = map[string]bool{}
	}
	for _, e := range unjoin(err) {
		if msg := e.Error(); !a.decodeSeen[msg] {
			a.decodeSeen[msg] = true
			a.log.Warn("ignoring an unreadable catalog record", "err", msg)
		}
	}
}

// unjoin splits an errors.Join error into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
