package serving

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/dataplane"
)

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
	return f.cfg.DataPlane.RoundTrip(ctx, dataplane.Peer{Addr: n.Addrs.Data, Name: n.Name, ID: n.ID}, req)
}
