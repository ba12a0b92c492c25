package serving

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/strata-mesh/strata/mesh"
)

// ErrNoDataPlane is a request to a peer where the mesh has no data plane
// (no mesh CA): requests between agents travel only over mutual TLS.
var ErrNoDataPlane = errors.New("serving: requests between agents need the data plane (a mesh CA)")

// SendWrite sends a policy write to controller n over the data plane, with
// exactly the headers given (the caller decides what n may see), marked as
// forwarded by this agent. The caller closes the response body.
func (f *Forwarder) SendWrite(ctx context.Context, n mesh.Node, method, uri string, header http.Header, body []byte) (*http.Response, error) {
	if f.cfg.DataPlane == nil || n.Addrs.Data == "" {
		return nil, fmt.Errorf("%w: %s has no data address", ErrNoDataPlane, n.Name)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.Addrs.Data+uri, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = header.Clone()
	req.Header.Set(HeaderForwarded, f.cfg.Mesh.Name())
	return f.cfg.DataPlane.RoundTrip(ctx, n.Addrs.Data, req)
}
