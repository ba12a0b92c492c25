package agent

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/strata-mesh/strata/mesh/pki"
)

// devRole is one kind of host in the dev mesh.
type devRole struct {
	prefix, tier, site, region string
	gpus                       []DeclaredGPU
	fabric                     string
	labels                     map[string]string
}

// devMix is the default multi-tier mix: two edge sites, an on-prem rack of
// three GPU nodes on one RDMA fabric, and a cloud region. The rack's third
// node comes last, so that a smaller mesh is what it was before it (tests
// count on it), and a three-node gang (examples/pytorch-ddp) has a fabric
// to run on in the default mesh. With more agents the mix repeats.
var devMix = []devRole{
	{prefix: "edge-a", tier: "edge", site: "edge-a", region: "eu-west", labels: map[string]string{"city": "lyon"}},
	{prefix: "edge-a", tier: "edge", site: "edge-a", region: "eu-west", labels: map[string]string{"city": "lyon"}},
	{prefix: "edge-b", tier: "edge", site: "edge-b", region: "us-east", labels: map[string]string{"city": "boston"}},
	{prefix: "gpu", tier: "onprem", site: "rack-1", region: "eu-west", fabric: "ib:rack-1",
		gpus: []DeclaredGPU{{Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30, Count: 8}}},
	{prefix: "gpu", tier: "onprem", site: "rack-1", region: "eu-west", fabric: "ib:rack-1",
		gpus: []DeclaredGPU{{Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30, Count: 8}}},
	{prefix: "cloud", tier: "cloud", site: "cloud-eu", region: "eu-west"},
	{prefix: "cloud", tier: "cloud", site: "cloud-eu", region: "eu-west"},
	{prefix: "gpu", tier: "onprem", site: "rack-1", region: "eu-west", fabric: "ib:rack-1",
		gpus: []DeclaredGPU{{Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30, Count: 8}}},
}

// DefaultDevAgents is the size of the default dev mesh.
var DefaultDevAgents = len(devMix)

// DevConfigs returns the configurations of an n-agent dev mesh on loopback,
// each with its data dir under dir. The first agent's API is on api (for
// example 127.0.0.1:7470); the others pick free ports, as does gossip. All
// agents after the first join the first.
func DevConfigs(n int, dir, api string) []Config {
	counts := map[string]int{}
	var out []Config
	for i := range n {
		r := devMix[i%len(devMix)]
		counts[r.prefix]++
		name := fmt.Sprintf("%s-%d", r.prefix, counts[r.prefix])
		c := DefaultConfig()
		c.Name = name
		c.DataDir = filepath.Join(dir, name)
		c.Tier, c.Site, c.Region = r.tier, r.site, r.region
		c.Labels = map[string]string{"dev": "true"}
		for k, v := range r.labels {
			c.Labels[k] = v
		}
		c.Bind = "127.0.0.1:0"
		c.API = "127.0.0.1:0"
		c.DataAddr = "127.0.0.1:0"
		if i == 0 {
			c.API = api
		}
		c.GPUs = r.gpus
		c.Fabric = r.fabric
		// Every request is a sample: drift shows within a few hundred.
		c.SampleFraction = 1
		if r.fabric != "" {
			c.RDMA = []DeclaredRDMA{{Device: "mlx5_0", Port: 1, LinkLayer: "InfiniBand", Rate: "400 Gb/sec (4X NDR)", Fabric: r.fabric}}
		}
		// The dev mesh runs on one host: GPUs it declares are the truth,
		// whatever this machine has.
		c.DisableNVML = len(r.gpus) > 0
		out = append(out, c)
	}
	return out
}

// devRTT is the emulated round-trip time between the dev mesh's sites: a
// metro edge site close to its on-prem rack and cloud region, and an edge
// site across the Atlantic.
var devRTT = map[[2]string]time.Duration{
	{"edge-a", "rack-1"}:   10 * time.Millisecond,
	{"edge-a", "cloud-eu"}: 20 * time.Millisecond,
	{"rack-1", "cloud-eu"}: 12 * time.Millisecond,
	{"edge-b", "edge-a"}:   90 * time.Millisecond,
	{"edge-b", "rack-1"}:   85 * time.Millisecond,
	{"edge-b", "cloud-eu"}: 80 * time.Millisecond,
}

// DevSiteRTT returns the dev mesh's emulated RTT between two sites: 1ms
// within a site, the table above between the default sites, 50ms otherwise.
func DevSiteRTT(a, b string) time.Duration {
	if a == b {
		return time.Millisecond
	}
	if d, ok := devRTT[[2]string{a, b}]; ok {
		return d
	}
	if d, ok := devRTT[[2]string{b, a}]; ok {
		return d
	}
	return 50 * time.Millisecond
}

// DevNetwork emulates the dev mesh's WAN: it knows each agent's gossip
// address and site, and delays packets by half the sites' RTT each way.
type DevNetwork struct {
	sites sync.Map // gossip address → site
}

// Register records that the agent at gossip address addr is in site.
func (n *DevNetwork) Register(addr, site string) { n.sites.Store(addr, site) }

// Delay returns the PacketDelay of an agent in site.
func (n *DevNetwork) Delay(site string) func(toAddr string) time.Duration {
	return func(toAddr string) time.Duration {
		to, ok := n.sites.Load(toAddr)
		if !ok {
			return 0
		}
		return DevSiteRTT(site, to.(string)) / 2
	}
}

// NewDevPKI makes the key material of a dev mesh: a mesh CA whose key every
// agent holds (each issues its own certificate) and one signing key.
func NewDevPKI() (PKI, error) {
	caCert, caKey, err := pki.NewCA("strata dev mesh CA")
	if err != nil {
		return PKI{}, err
	}
	sk, err := pki.NewSigningKey()
	if err != nil {
		return PKI{}, err
	}
	skPEM, err := pki.EncodePrivateKey(sk)
	if err != nil {
		return PKI{}, err
	}
	return PKI{CACert: caCert, CAKey: caKey, SigningKey: skPEM}, nil
}
