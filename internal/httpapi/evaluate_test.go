package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/strata-mesh/strata/placement"
)

// TestPlaceRefusal: what the engine says of a policy becomes a refusal
// naming the field, except a client site not measured yet, which is the
// mesh's state (plan answers 503, apply warns).
func TestPlaceRefusal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err   error
		code  int
		field string
	}{
		{nil, 0, ""},
		{fmt.Errorf("%w %q: try again", placement.ErrClientNotMeasured, "edge-a"), 0, ""},
		{fmt.Errorf("%w: %q", placement.ErrUnknownClient, "atlantis"), http.StatusBadRequest, "spec.latency.clients"},
		{fmt.Errorf("%w: negative resources", placement.ErrInvalidRequest), http.StatusBadRequest, ""},
	} {
		f := placeRefusal("InferenceService/s", c.err)
		if f == nil {
			if c.code != 0 {
				t.Errorf("%v: not refused, want %d", c.err, c.code)
			}
			continue
		}
		if f.code != c.code || f.field != c.field || !errors.Is(f.err, c.err) {
			t.Errorf("%v: refused %d %q %v, want %d %q", c.err, f.code, f.field, f.err, c.code, c.field)
		}
	}
}
