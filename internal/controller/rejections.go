package controller

import "github.com/strata-mesh/strata/placement"

// SummarizeRejections says in a line why a decision placed less than it
// wanted, as a failed placement's message does: the count of nodes per
// reason, most first, then the last tier fallback.
func SummarizeRejections(d *placement.Decision) string { return summarizeRejections(d) }
