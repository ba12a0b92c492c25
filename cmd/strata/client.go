package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/policy"
)

// clientFlags are the flags every API command takes.
type clientFlags struct {
	address string
	output  string
}

func addClientFlags(fs *flag.FlagSet) *clientFlags {
	c := &clientFlags{}
	def := os.Getenv("STRATA_ADDR")
	if def == "" {
		def = "http://127.0.0.1:7470"
	}
	fs.StringVar(&c.address, "address", def, "agent API `URL` (env STRATA_ADDR)")
	fs.StringVar(&c.output, "o", "table", "output `format`: table or json")
	return c
}

func (c *clientFlags) check() error {
	if c.output != "table" && c.output != "json" {
		return fmt.Errorf("-o %q: use table or json", c.output)
	}
	return nil
}

// get fetches path from the agent into v, or returns the API's error.
// raw, when non-nil, receives the body as sent.
func (c *clientFlags) get(path string, v any, raw *[]byte) error {
	return c.request(http.MethodGet, path, "", nil, -1, v, raw)
}

// do sends a request with an in-memory body.
func (c *clientFlags) do(method, path, contentType string, body []byte, v any, raw *[]byte) error {
	return c.request(method, path, contentType, bytes.NewReader(body), int64(len(body)), v, raw)
}

// doStream sends a streamed body of known length.
func (c *clientFlags) doStream(method, path string, body io.Reader, size int64, v any, raw *[]byte) error {
	return c.request(method, path, "application/octet-stream", body, size, v, raw)
}

// request sends one API call and decodes a JSON answer into v (when not
// nil); raw, when not nil, receives the body as sent. An API error comes
// back as its message; a policy error (400 with positioned errors) lists
// every error, one per line. Uploads have no overall time limit.
func (c *clientFlags) request(method, path, contentType string, body io.Reader, size int64, v any, raw *[]byte) error {
	base := c.address
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(base, "/")+path, body)
	if err != nil {
		return err
	}
	if size >= 0 {
		req.ContentLength = size
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if tok := os.Getenv("STRATA_TOKEN"); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	hc := &http.Client{}
	if method == http.MethodGet {
		hc.Timeout = 10 * time.Second
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the agent at %s: %w (is one running? set -address or STRATA_ADDR)", base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error  string `json:"error"`
			Errors []struct {
				File    string `json:"file"`
				Line    int    `json:"line"`
				Column  int    `json:"column"`
				Field   string `json:"field"`
				Message string `json:"message"`
			} `json:"errors"`
		}
		if json.Unmarshal(b, &e) == nil && len(e.Errors) > 0 {
			var lines []string
			for _, pe := range e.Errors {
				lines = append(lines, fmt.Sprintf("%s:%d:%d: %s: %s", pe.File, pe.Line, pe.Column, pe.Field, pe.Message))
			}
			return fmt.Errorf("the policy has %d error(s):\n%s", len(lines), strings.Join(lines, "\n"))
		}
		if e.Error != "" {
			return fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode)
		}
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if raw != nil {
		*raw = b
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(b, v)
}

func runMembers(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("members", "[-o json]", stderr)
	c := addClientFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	var members []mesh.Member
	var raw []byte
	if err := c.get("/v1/members", &members, &raw); err != nil {
		return err
	}
	if c.output == "json" {
		_, err := stdout.Write(raw)
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tADDRESS\tSTATUS\tTIER\tSITE")
	for _, m := range members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.ID, m.Addr, m.Status, m.Tier, m.Site)
	}
	return tw.Flush()
}

func runNodes(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("nodes", "[-tier T] [-site S] [-label k=v] [-o json]", stderr)
	c := addClientFlags(fs)
	tier := fs.String("tier", "", "only nodes of this tier")
	site := fs.String("site", "", "only nodes of this site")
	var labels []string
	fs.Func("label", "only nodes with label `k=v` (repeatable)", func(v string) error { labels = append(labels, v); return nil })
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	q := url.Values{}
	if *tier != "" {
		q.Set("tier", *tier)
	}
	if *site != "" {
		q.Set("site", *site)
	}
	for _, l := range labels {
		q.Add("label", l)
	}
	path := "/v1/nodes"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var nodes []mesh.Node
	var raw []byte
	if err := c.get(path, &nodes, &raw); err != nil {
		return err
	}
	if c.output == "json" {
		_, err := stdout.Write(raw)
		return err
	}
	printNodes(stdout, nodes, nil)
	return nil
}

// printNodes prints the nodes table; apis, when given, adds an API column.
func printNodes(w io.Writer, nodes []mesh.Node, apis map[string]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	hdr := "NAME\tSTATUS\tTIER\tSITE\tREGION\tCPU\tMEMORY\tGPUS\tFABRIC"
	if apis != nil {
		hdr += "\tAPI"
	}
	fmt.Fprintln(tw, hdr)
	for _, n := range nodes {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s", n.Name, n.Status, n.Tier, n.Site, n.Region,
			n.Capabilities.CPU.Cores, policy.FormatBytes(n.Capabilities.Memory.Total), gpuSummary(n.Capabilities), dash(n.Capabilities.Fabric))
		if apis != nil {
			line += "\t" + apis[n.Name]
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

func gpuSummary(c mesh.Capabilities) string {
	if len(c.GPUs) == 0 {
		return "-"
	}
	counts := map[string]int{}
	var models []string
	for _, g := range c.GPUs {
		if counts[g.Model] == 0 {
			models = append(models, g.Model)
		}
		counts[g.Model]++
	}
	slices.Sort(models)
	var parts []string
	for _, m := range models {
		parts = append(parts, fmt.Sprintf("%d× %s", counts[m], m))
	}
	return strings.Join(parts, ", ") + " (" + c.GPUSource + ")"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runNode(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("node", "NAME|ID [-o json]", stderr)
	c := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("a node name or ID is required")}
	}
	if err := c.check(); err != nil {
		return err
	}
	var n mesh.Node
	var raw []byte
	if err := c.get("/v1/nodes/"+url.PathEscape(pos[0]), &n, &raw); err != nil {
		return err
	}
	if c.output == "json" {
		_, err := stdout.Write(raw)
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Name", n.Name)
	row("ID", n.ID)
	row("Status", string(n.Status))
	row("Tier / site / region", n.Tier+" / "+n.Site+" / "+n.Region)
	var labels []string
	for _, k := range sortedKeys(n.Labels) {
		labels = append(labels, k+"="+n.Labels[k])
	}
	row("Labels", dash(strings.Join(labels, ", ")))
	row("Gossip / API", n.Addrs.Gossip+" / "+n.Addrs.API)
	row("CPU", fmt.Sprintf("%d cores %s %s (%s)", n.Capabilities.CPU.Cores, n.Capabilities.CPU.Arch, n.Capabilities.CPU.Model, n.Capabilities.CPU.Source))
	row("Memory", policy.FormatBytes(n.Capabilities.Memory.Total))
	row("GPUs", gpuSummary(n.Capabilities))
	for _, r := range n.Capabilities.RDMA {
		row("RDMA", fmt.Sprintf("%s/%d %s %s %s fabric=%s (%s)", r.Name, r.Port, r.LinkLayer, r.Rate, r.State, r.Fabric, r.Source))
	}
	row("Fabric", dash(n.Capabilities.Fabric))
	row("Free", fmt.Sprintf("cpu %dm, memory %s, gpus %d", n.Load.FreeCPU, policy.FormatBytes(n.Load.FreeMemory), n.Load.FreeGPUs))
	row("Version", fmt.Sprint(n.Version))
	return tw.Flush()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func runRTT(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rtt", "NODE [NODE]", stderr)
	c := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("give one node (RTT from the agent's node) or two")}
	}
	q := url.Values{}
	if len(pos) == 2 {
		q.Set("from", pos[0])
		q.Set("to", pos[1])
	} else {
		q.Set("to", pos[0])
	}
	var r struct {
		From  string  `json:"from"`
		To    string  `json:"to"`
		RTTMs float64 `json:"rtt_ms"`
	}
	var raw []byte
	if err := c.get("/v1/rtt?"+q.Encode(), &r, &raw); err != nil {
		return err
	}
	if c.output == "json" {
		_, err := stdout.Write(raw)
		return err
	}
	fmt.Fprintf(stdout, "Estimated RTT %s ↔ %s: %.3f ms\n", r.From, r.To, r.RTTMs)
	return nil
}
