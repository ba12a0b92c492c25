package federation

import (
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/placement"
)

// FuzzSummary feeds arbitrary summaries, as another site's gateway could
// publish them, through what agents do with them: a gateway keeps it in
// its site's catalog, and agents read it to list sites (with their RTT),
// to find holders of a blob and to hand policies over. Nothing may panic.
func FuzzSummary(f *testing.F) {
	f.Add([]byte(`{"site":"b","seq":1,"nodes":2,"alive":2,"tiers":{"edge":{"nodes":2,"millicores":8000,"free_cpu":4000,"free_memory":1073741824,"shapes":[{"free_cpu":2000,"free_memory":536870912,"nodes":2}]}},` +
		`"fabrics":{"ib":8},"holders":{"sha256:ab":["b-1","b-2"]},"contacts":{"b-1":{"data":"10.0.0.2:7471","federation":["/ip4/10.0.0.2/tcp/7950/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA"]}},` +
		`"gateways":[{"name":"b-1","addrs":["/ip4/10.0.0.2/tcp/7950/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA"]}],"coordinate":{"Vec":[0.01,0,0,0,0,0,0,0],"Error":1.5,"Adjustment":0,"Height":0.00001}}`))
	f.Add([]byte(`{"site":"c","coordinate":{"Vec":[1e308,-1e308],"Error":-1,"Adjustment":-5,"Height":-1}}`))
	f.Add([]byte(`{"site":"d","tiers":{"gpu":{"nodes":-1,"free_gpus":-4,"shapes":[{"nodes":-9223372036854775808}]}},"fabrics":{"":-1}}`))
	f.Add([]byte(`{"site":"e","holders":{"x":["nobody"]},"contacts":{"nobody":{"federation":["/p2p-circuit","garbage"]}}}`))
	id, err := mesh.NewIdentity()
	if err != nil {
		f.Fatal(err)
	}
	m, err := mesh.New(mesh.Config{Name: "a-1", Identity: id, Transport: (&meshtest.Network{}).NewTransport("a-1"),
		Local: mesh.NodeState{Tier: mesh.TierEdge, Site: "a"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	own := &coordinate.Coordinate{Vec: make([]float64, 8), Height: 1e-5}
	reqs := []*placement.Request{
		{Kind: placement.Inference, Replicas: 2, Resources: placement.Resources{CPU: 500, Memory: 1 << 20}},
		{Kind: placement.Inference, Latency: placement.Latency{P99: 50 * time.Millisecond, Clients: []string{"a", "b", "c", "d"}}},
		{Kind: placement.Training, Resources: placement.Resources{GPUs: 1}, Gang: placement.Gang{Nodes: 2, GPUsPerNode: 4, SameFabric: true}},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Summary
		if json.Unmarshal(data, &s) != nil || s.Site == "" || s.Site == m.Site() {
			return // dropped and counted as readSummaries does
		}
		key := SitePrefix + s.Site
		if _, err := m.Put(key, encode(Remote{Summary: s, Heard: time.Now().UTC()}), mesh.PutOptions{Scope: mesh.ScopeSite}); err != nil {
			return
		}
		defer m.Delete(key)
		now := time.Now()
		Sites(m, now)
		for digest := range s.Holders {
			RemoteHolders(m, digest, now)
		}
		for _, req := range reqs {
			HandOff(m.Site(), own, Remotes(m, now), req)
		}
		same(s, s)
	})
}
