package agent

import (
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseConfig(t *testing.T) {
	src := `name: gpu-7
tier: onprem
site: rack-2
labels: {zone: b}
join: ["10.0.0.1:7946"]
gossip_key_file: /etc/strata/gossip.key
ca_cert: /etc/strata/ca.crt
gpus:
  - model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    count: 8
fabric: ib:rack-2
`
	c, err := ParseConfig("agent.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []DeclaredGPU{{Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30, Count: 8}}
	if diff := cmp.Diff(want, c.GPUs); diff != "" {
		t.Errorf("gpus (-want +got):\n%s", diff)
	}
	if c.Name != "gpu-7" || c.Tier != "onprem" || c.API != "127.0.0.1:7470" || c.Labels["zone"] != "b" || c.Fabric != "ib:rack-2" {
		t.Errorf("config = %+v", c)
	}
}

func TestParseConfigErrorsNameLineAndKey(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"unknown key", "name: a\ntier: edge\nbnid: 0.0.0.0:1\n", []string{`agent.yaml:3: unknown key "bnid"`}},
		{"unknown nested key", "gpus:\n  - model: x\n    memroy: 1Gi\n", []string{`agent.yaml:3: unknown key "memroy"`}},
		{"wrong type", "join: 7\n", []string{"agent.yaml:1:", "cannot unmarshal"}},
		{"bad unit", "gpus:\n  - model: x\n    memory: lots\n", []string{"agent.yaml:3", `invalid byte size "lots"`}},
		{"malformed yaml", "name: [a\n", []string{"agent.yaml:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("agent.yaml", []byte(tc.src))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestValidateGathersAllProblems(t *testing.T) {
	c := Config{Name: "x", Tier: "fog", LogLevel: "loud", LogFormat: "xml", GossipKey: "short", API: "nohostport", Advertise: "0.0.0.0:7946", AdvertiseAPI: "[::]:7470",
		MaxConnectionsPerClient: -1, APIAllowedHosts: []string{"http://node1:7470"}}
	c.EnsureDefaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{"tier: \"fog\" is not a tier", "log_level:", `log_format: "xml" is not a log format`, "gossip_key:", "api: \"nohostport\"",
		"advertise: \"0.0.0.0:7946\" cannot be dialled", "(-advertise)", "advertise_api: \"[::]:7470\" cannot be dialled", "(-advertise-api)",
		"max_connections_per_client: must not be negative", `api_allowed_hosts: "http://node1:7470": want a host name`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

// TestValidateFederation: each bad federation field is named, peers
// without listen are refused (federation would be off), and so is an agent
// behind a NAT with no peer to relay through.
func TestValidateFederation(t *testing.T) {
	c := Config{Name: "x", Tier: "edge", Federation: FederationConfig{Listen: []string{"tcp:7950"}, Peers: []string{"/ip4/10.0.0.1/tcp/7950"}, Gateways: -1}}
	c.EnsureDefaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{`federation.listen[0]: "tcp:7950" is not a multiaddr`, `federation.peers[0]: "/ip4/10.0.0.1/tcp/7950" is not a peer address`, "/p2p/PEER-ID", "federation.gateways: -1"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	c = Config{Name: "x", Tier: "edge", Federation: FederationConfig{Peers: []string{"/ip4/10.0.0.1/tcp/7950/p2p/12D3KooWGRUVh7AhCH5uwbpfBqfBqdvBqvBq5oFf1r2mqMuHbnxk"}}}
	c.EnsureDefaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "federation.peers: set federation.listen too") {
		t.Errorf("peers without listen: %v", err)
	}
	c = Config{Name: "x", Tier: "edge", Federation: FederationConfig{Listen: []string{"/ip4/0.0.0.0/tcp/7950"}, Reachability: "nat"}}
	c.EnsureDefaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `federation.reachability: "nat": use auto, public or private`) {
		t.Errorf("unknown reachability: %v", err)
	}
	c.Federation.Reachability = "private"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "federation.reachability: private needs federation.peers") {
		t.Errorf("private without peers: %v", err)
	}
}

func TestFlagsOverrideFile(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/agent.yaml"
	writeFile(t, path, "name: from-file\ntier: cloud\nsite: s1\nlabels: {a: \"1\"}\n")
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	load := Flags(fs)
	if err := fs.Parse([]string{"-config", path, "-tier", "edge", "-label", "b=2", "-join", "h:1", "-join", "h:2", "-bind", "127.0.0.1:7946"}); err != nil {
		t.Fatal(err)
	}
	c, err := load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "from-file" || c.Tier != "edge" || c.Site != "s1" {
		t.Errorf("name/tier/site = %s/%s/%s", c.Name, c.Tier, c.Site)
	}
	if diff := cmp.Diff(map[string]string{"a": "1", "b": "2"}, c.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"h:1", "h:2"}, c.Join); diff != "" {
		t.Errorf("join (-want +got):\n%s", diff)
	}

	fs = flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	Flags(fs)
	if err := fs.Parse([]string{"-label", "novalue"}); err == nil {
		t.Error("-label without = accepted")
	}
}

func TestDisableNVMLFlagTakesItsValue(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-disable-nvml"}, true},
		{[]string{"-disable-nvml=true"}, true},
		{[]string{"-disable-nvml=false"}, false},
	} {
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		load := Flags(fs)
		if err := fs.Parse(append(tc.args, "-insecure")); err != nil {
			t.Fatal(err)
		}
		c, err := load()
		if err != nil {
			t.Fatal(err)
		}
		if c.DisableNVML != tc.want {
			t.Errorf("%v: DisableNVML = %v, want %v", tc.args, c.DisableNVML, tc.want)
		}
	}
}

func TestSecretsFromFilesAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	key := "c2VjcmV0LWtleS1vZi0zMi1ieXRlcy0tLS0tLS0tLS0="
	write := func(name, v string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := Config{GossipKeyFile: write("gossip", key), APITokenFile: write("token", "s3cret")}
	if err := c.loadSecrets(); err != nil {
		t.Fatal(err)
	}
	if c.GossipKey != key || c.APIToken != "s3cret" {
		t.Errorf("from files: gossip key %q, token %q", c.GossipKey, c.APIToken)
	}
	t.Setenv("STRATA_API_TOKEN", "from-env")
	c = Config{}
	if err := c.loadSecrets(); err != nil || c.APIToken != "from-env" {
		t.Errorf("from the environment: token %q, err %v", c.APIToken, err)
	}
	c = Config{GossipKeyFile: dir + "/missing"}
	if err := c.loadSecrets(); err == nil || !strings.Contains(err.Error(), "gossip_key_file") {
		t.Errorf("missing file: err = %v, want one naming gossip_key_file", err)
	}
}

func TestACLTokensValidated(t *testing.T) {
	c := DefaultConfig()
	c.ACLTokens = []ACLToken{
		{Name: "ci", SHA256: strings.Repeat("ab", 32), Scopes: []string{"read", "write"}},
		{Name: "bad", SHA256: "xyz", Scopes: []string{"admin"}},
		{Name: "none", SHA256: strings.Repeat("cd", 32)},
	}
	err := c.Validate()
	for _, want := range []string{"acl_tokens[1].sha256", `acl_tokens[1].scopes: "admin" is not a scope`, "acl_tokens[2].scopes: list at least one"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to say %q", err, want)
		}
	}
	if strings.Contains(fmt.Sprint(err), "acl_tokens[0]") {
		t.Errorf("a good token reported: %v", err)
	}
}

// TestOffLoopbackNeedsKeyAndCA: an agent whose gossip is bound off
// loopback starts only with a gossip key and a mesh CA, or insecure.
func TestOffLoopbackNeedsKeyAndCA(t *testing.T) {
	validKey := base64.StdEncoding.EncodeToString(make([]byte, 32))
	tests := []struct {
		name string
		edit func(*Config)
		want string // "" for valid
	}{
		{"default bind, nothing set", func(*Config) {}, "gossip_key (or gossip_key_file) and ca_cert unset"},
		{"a key, no CA", func(c *Config) { c.GossipKey = validKey }, "is off loopback and ca_cert unset"},
		{"a CA, no key", func(c *Config) { c.CACertFile = "/etc/strata/ca.crt" }, "is off loopback and gossip_key (or gossip_key_file) unset"},
		{"key file and CA", func(c *Config) { c.GossipKeyFile, c.CACertFile = "/k", "/etc/strata/ca.crt" }, ""},
		{"loopback", func(c *Config) { c.Bind = "127.0.0.1:7946" }, ""},
		{"localhost", func(c *Config) { c.Bind = "localhost:7946" }, ""},
		{"insecure", func(c *Config) { c.Insecure = true }, ""},
		{"a host address", func(c *Config) { c.Bind = "10.0.0.7:7946" }, "10.0.0.7:7946 is off loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("STRATA_GOSSIP_KEY", "")
			c := DefaultConfig()
			c.Name = "a"
			tt.edit(&c)
			c.EnsureDefaults()
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want one saying %q", err, tt.want)
			}
		})
	}
}
