package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
	"github.com/strata-mesh/strata/policy"
)

// clientFlags are the flags every API command takes.
type clientFlags struct {
	address string
	output  string
	token   string
}

func addClientFlags(fs *flag.FlagSet) *clientFlags {
	c := &clientFlags{}
	def := os.Getenv("STRATA_ADDR")
	if def == "" {
		def = client.DefaultAddr
	}
	fs.StringVar(&c.address, "address", def, "agent API `URL` (env STRATA_ADDR)")
	fs.StringVar(&c.output, "o", outTable, "output `format`: "+strings.Join(outputFormats, ", "))
	fs.StringVar(&c.token, "token", "", "API `token` (default $STRATA_TOKEN, else $STRATA_API_TOKEN)")
	return c
}

func (c *clientFlags) check() error {
	if !slices.Contains(outputFormats, c.output) {
		return fmt.Errorf("-o %q: use %s", c.output, strings.Join(outputFormats, ", "))
	}
	return nil
}

// client returns the API client of the flags' address, with the token
// in STRATA_TOKEN.
func (c *clientFlags) client() *client.Client {
	return client.New(c.address, client.WithToken(cmp.Or(c.token, os.Getenv("STRATA_TOKEN"), os.Getenv("STRATA_API_TOKEN"))))
}

// readTimeout bounds a read-only call; calls that change something
// (apply, push, pull) have no overall time limit.
const readTimeout = 10 * time.Second

// readCtx is the context of a read-only call.
func readCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), readTimeout)
}

// explain turns a call's error into what the CLI prints: the API's errors
// as they are, an agent that cannot be reached with a hint.
func (c *clientFlags) explain(err error) error {
	var nae *client.NotAgentError
	if errors.As(err, &nae) {
		ct := cmp.Or(nae.ContentType, "an answer of no content type")
		return fmt.Errorf("%s answered with %s: is it a strata agent's API address? set STRATA_ADDR or -address", nae.URL, ct)
	}
	var ue *url.Error
	if err != nil && errors.As(err, &ue) {
		return fmt.Errorf("cannot reach the agent at %s: %w (is one running? set -address or STRATA_ADDR)", c.client().Addr(), err)
	}
	var ae *client.Error
	if errors.As(err, &ae) && ae.JSON && len(ae.Problems) == 0 {
		return &agentError{ae}
	}
	return err
}

// agentError is an agent's error answer phrased for the CLI's user: the
// API's pointers to its own paths become the command to run, and a
// refusal (4xx) needs no status code, since its message says why.
type agentError struct{ err *client.Error }

// seeAPI matches the API's "(see GET /v1/jobs)".
var seeAPI = regexp.MustCompile(`\(see GET /v1/([a-z]+)\)`)

func (e *agentError) Error() string {
	msg := seeAPI.ReplaceAllString(e.err.Message, "(strata $1 lists them)")
	if e.err.Status >= 500 {
		return fmt.Sprintf("%s (HTTP %d)", msg, e.err.Status)
	}
	return msg
}

func (e *agentError) Unwrap() error { return e.err }

func runMembers(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("members", "[-o json|yaml]", stderr)
	c := addClientFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	members, err := c.client().Members(ctx, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	sites, err := c.client().Sites(ctx)
	if err != nil {
		return c.explain(err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tADDRESS\tSTATUS\tTIER\tSITE\tSCHEMA\tBUILD")
	for _, m := range members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.ID, m.Addr, m.Status, m.Tier, m.Site, cmp.Or(m.Schema, "1.0"), cmp.Or(m.Build, "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	return printSites(stdout, sites)
}

func printSites(w io.Writer, sites []api.Site) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SITE\tREGION\tNODES\tALIVE\tSTATUS\tRTT\tVIA")
	for _, s := range sites {
		via := cmp.Or(s.Via, "pool")
		if s.Path == api.PathRelayed {
			via += ", relayed"
		}
		if s.Heard != nil {
			via += fmt.Sprintf(" (heard %s ago)", time.Since(*s.Heard).Round(time.Second))
		}
		rtt := "-"
		if s.RTTMillis != nil {
			rtt = fmt.Sprintf("%.1fms", *s.RTTMillis)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Name, s.Region, s.Nodes, s.Alive, s.Status, rtt, via)
	}
	return tw.Flush()
}

func runHealth(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("health", "[-o json|yaml]", stderr)
	c := addClientFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	h, err := c.client().Health(ctx, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		if err := c.emit(stdout, raw); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "%s: %s (%d alive members)\n", h.Node, h.Status, h.AliveMembers)
		for _, r := range h.Reasons {
			fmt.Fprintf(stdout, "  %s\n", r)
		}
	}
	if h.Status != "ok" {
		return &exitError{code: 2}
	}
	return nil
}

func runSites(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sites", "[-o json|yaml]", stderr)
	c := addClientFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	sites, err := c.client().Sites(ctx, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	return printSites(stdout, sites)
}

func runNodes(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("nodes", "[-tier T] [-site S] [-label k=v] [-o wide|json|yaml]", stderr)
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
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	nodes, err := c.client().Nodes(ctx, client.NodeFilter{Tier: *tier, Site: *site, Labels: labels}, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	printNodes(stdout, nodes, nil, c.wide())
	return nil
}

// printNodes prints the nodes table; apis, when given, adds an API
// column. wide adds the architecture, what is free, the inference
// requests per second served, the labels and the advertised API address
// (unless apis gives one).
func printNodes(w io.Writer, nodes []api.Node, apis map[string]string, wide bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	hdr := "NAME\tSTATUS\tTIER\tSITE\tREGION\tCPU\tMEMORY\tGPUS\tFABRIC"
	if wide {
		hdr += "\tARCH\tFREE CPU\tFREE MEMORY\tFREE GPUS\tREQ/S\tLABELS"
	}
	if apis != nil || wide {
		hdr += "\tAPI"
	}
	fmt.Fprintln(tw, hdr)
	for _, n := range nodes {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s", n.Name, n.Status, n.Tier, n.Site, n.Region,
			n.Capabilities.CPU.Cores, policy.FormatBytes(n.Capabilities.Memory.Total), gpuSummary(n.Capabilities), dash(n.Capabilities.Fabric))
		if wide {
			var labels []string
			for _, k := range sortedKeys(n.Labels) {
				labels = append(labels, k+"="+n.Labels[k])
			}
			line += fmt.Sprintf("\t%s\t%dm\t%s\t%d\t%s\t%s", dash(n.Capabilities.CPU.Arch), n.Load.FreeCPU, policy.FormatBytes(n.Load.FreeMemory),
				n.Load.FreeGPUs, strconv.FormatFloat(n.Load.QPS, 'f', -1, 64), dash(strings.Join(labels, ",")))
		}
		switch {
		case apis != nil:
			line += "\t" + apis[n.Name]
		case wide:
			line += "\t" + dash(n.Addrs.API)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

func gpuSummary(c api.Capabilities) string {
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
	fs := newFlags("node", "NAME|ID [-o json|yaml]", stderr)
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
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	n, err := c.client().Node(ctx, pos[0], client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emit(stdout, raw)
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
	from, to := "", pos[0]
	if len(pos) == 2 {
		from, to = pos[0], pos[1]
	}
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	r, err := c.client().RTT(ctx, from, to, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	fmt.Fprintf(stdout, "Estimated RTT %s ↔ %s: %.3f ms\n", r.From, r.To, r.Millis)
	return nil
}
