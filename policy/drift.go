package policy

// DriftEvery is how many sampled rows a windowed drift monitor of window
// rows takes between two checks.
func DriftEvery(window int) int { return max(1, window/5) }
