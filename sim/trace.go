package sim

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/policy"
)

// EventKind is what happens at one point of a trace.
type EventKind string

// Event kinds.
const (
	// EventService is the arrival of an InferenceService.
	EventService EventKind = "service"
	// EventTraining is the arrival of a TrainingJob (a gang).
	EventTraining EventKind = "training"
	// EventSiteDown takes every node of a site down.
	EventSiteDown EventKind = "site-down"
	// EventNodeDown takes one node down.
	EventNodeDown EventKind = "node-down"
	// EventDrift is drift on a service: a one-GPU retrain is placed near
	// the service's data, and its new model is rolled out to every site
	// that serves it.
	EventDrift EventKind = "drift"
)

// Event is one line of a workload trace. Which fields matter depends on
// Kind; the CSV columns and YAML keys are the json names.
type Event struct {
	// At orders the events; events at the same time keep trace order.
	At time.Duration `json:"at"`
	// Kind is what happens.
	Kind EventKind `json:"kind"`
	// Name is the service or job (service, training); for drift, the
	// service that drifted.
	Name string `json:"name,omitempty"`
	// Target is the site (site-down) or node (node-down).
	Target string `json:"target,omitempty"`
	// Replicas is the number of inference replicas (default 1).
	Replicas int `json:"replicas,omitempty"`
	// Clients are the client sites of a service.
	Clients []string `json:"clients,omitempty"`
	// P99 is a service's latency SLO from its clients.
	P99 time.Duration `json:"p99,omitempty"`
	// CPU in millicores and Memory in bytes, per replica or gang member.
	CPU    int64 `json:"cpu,omitempty"`
	Memory int64 `json:"memory,omitempty"`
	// GPUs per replica or gang member, and the GPU model wanted.
	GPUs     int    `json:"gpus,omitempty"`
	GPUModel string `json:"gpu_model,omitempty"`
	// Nodes is a training gang's size (default 1).
	Nodes int `json:"nodes,omitempty"`
	// Data is the model digest (service) or dataset (training) the
	// workload reads, and Bytes its size.
	Data  string `json:"data,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
}

// Request is the placement request an arrival asks for; nil for failures
// and drift.
func (e *Event) Request(seed uint64) *placement.Request {
	switch e.Kind {
	case EventService:
		r := &placement.Request{
			Kind: placement.Inference, Key: "InferenceService/" + e.Name,
			Replicas:  max(1, e.Replicas),
			Resources: placement.Resources{CPU: e.CPU, Memory: e.Memory, GPUs: e.GPUs, GPUModel: e.GPUModel},
			Latency:   placement.Latency{P99: e.P99, Clients: e.Clients},
			Tiers:     []string{placement.TierEdge, placement.TierOnprem, placement.TierCloud},
			Spread:    placement.SpreadSite,
			Seed:      seed,
		}
		if e.Data != "" {
			r.Data = []placement.DataRef{{Digest: e.Data, Bytes: e.Bytes}}
		}
		return r
	case EventTraining:
		r := &placement.Request{
			Kind: placement.Training, Key: "TrainingJob/" + e.Name,
			Resources: placement.Resources{CPU: e.CPU, Memory: e.Memory, GPUModel: e.GPUModel},
			Gang:      placement.Gang{Nodes: max(1, e.Nodes), GPUsPerNode: max(1, e.GPUs), SameFabric: true},
			Tiers:     []string{placement.TierOnprem, placement.TierCloud},
			Seed:      seed,
		}
		if e.Data != "" {
			r.Data = []placement.DataRef{{Dataset: e.Data, Bytes: e.Bytes}}
		}
		return r
	}
	return nil
}

// FieldError is a problem with one field of an event.
type FieldError struct {
	Field, Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, a ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, a...)}
}

// Validate reports what is wrong with one event, as a *FieldError.
func (e *Event) Validate() error {
	switch e.Kind {
	case EventService:
		if e.Name == "" {
			return fieldErr("name", "a service needs a name")
		}
		if e.P99 > 0 && len(e.Clients) == 0 {
			return fieldErr("clients", "a p99 needs at least one client site")
		}
	case EventTraining:
		if e.Name == "" {
			return fieldErr("name", "a training job needs a name")
		}
	case EventSiteDown, EventNodeDown:
		if e.Target == "" {
			return fieldErr("target", "%s needs the %s it takes down", e.Kind, strings.TrimSuffix(string(e.Kind), "-down"))
		}
	case EventDrift:
		if e.Name == "" {
			return fieldErr("name", "drift needs the service that drifted")
		}
	default:
		return fieldErr("kind", "%q is not one of service, training, site-down, node-down, drift", e.Kind)
	}
	if e.Replicas < 0 || e.CPU < 0 || e.Memory < 0 || e.GPUs < 0 || e.Nodes < 0 || e.Bytes < 0 || e.P99 < 0 || e.At < 0 {
		return errors.New("a count, size or time is negative")
	}
	return nil
}

// csvColumns are the trace's CSV columns, in the order WriteCSV writes
// them. A trace file may list any subset, in any order, with at and kind.
var csvColumns = []string{"at", "kind", "name", "target", "replicas", "clients", "p99", "cpu", "memory", "gpus", "gpu_model", "nodes", "data", "bytes"}

// ReadTrace reads a trace: CSV with a header line (the columns of
// WriteCSV, clients separated by ';'), or YAML, a list of events under
// `events:`. name is the file name errors start with; a file ending in
// .yaml or .yml, or whose first line is `events:`, is YAML.
func ReadTrace(name string, r io.Reader) ([]Event, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var evs []Event
	if strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || bytes.HasPrefix(bytes.TrimSpace(data), []byte("events:")) {
		evs, err = readYAML(name, data)
	} else {
		evs, err = readCSV(name, data)
	}
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(evs, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	return evs, nil
}

func readCSV(name string, data []byte) ([]Event, error) {
	cr := csv.NewReader(bytes.NewReader(data))
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	cols := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(h)
		if !slices.Contains(csvColumns, h) {
			return nil, fmt.Errorf("%s:1: column %q: not one of %s", name, h, strings.Join(csvColumns, ", "))
		}
		cols[h] = i
	}
	for _, need := range []string{"at", "kind"} {
		if _, ok := cols[need]; !ok {
			return nil, fmt.Errorf("%s:1: no %q column", name, need)
		}
	}
	var out []Event
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(rec) != len(header) {
			return nil, fmt.Errorf("%s:%d: %d fields, the header has %d", name, line, len(rec), len(header))
		}
		get := func(c string) string {
			if i, ok := cols[c]; ok {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		fields := make(map[string]string, len(csvColumns))
		for _, c := range csvColumns {
			fields[c] = get(c)
		}
		ev, field, err := eventFrom(fields)
		if err == nil {
			err = ev.Validate()
			var fe *FieldError
			if errors.As(err, &fe) {
				field, err = fe.Field, errors.New(fe.Message)
			}
		}
		if err != nil {
			if field != "" {
				return nil, fmt.Errorf("%s:%d: column %s: %w", name, line, field, err)
			}
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		out = append(out, ev)
	}
}

func readYAML(name string, data []byte) ([]Event, error) {
	var doc struct {
		Events []yaml.Node `yaml:"events"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var out []Event
	for _, n := range doc.Events {
		var raw map[string]yaml.Node
		if err := n.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%s:%d:%d: %w", name, n.Line, n.Column, err)
		}
		fields := map[string]string{}
		for k, v := range raw {
			if !slices.Contains(csvColumns, k) {
				return nil, fmt.Errorf("%s:%d:%d: field %q: not one of %s", name, v.Line, v.Column, k, strings.Join(csvColumns, ", "))
			}
			if k == "clients" && v.Kind == yaml.SequenceNode {
				var cs []string
				if err := v.Decode(&cs); err != nil {
					return nil, fmt.Errorf("%s:%d:%d: field clients: %w", name, v.Line, v.Column, err)
				}
				fields[k] = strings.Join(cs, ";")
				continue
			}
			fields[k] = v.Value
		}
		ev, field, err := eventFrom(fields)
		if err == nil {
			err = ev.Validate()
			var fe *FieldError
			if errors.As(err, &fe) {
				field, err = fe.Field, errors.New(fe.Message)
			}
		}
		if err != nil {
			line, col := n.Line, n.Column
			if v, ok := raw[field]; ok {
				line, col = v.Line, v.Column
			}
			if field != "" {
				return nil, fmt.Errorf("%s:%d:%d: field %s: %w", name, line, col, field, err)
			}
			return nil, fmt.Errorf("%s:%d:%d: %w", name, line, col, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// eventFrom parses one event's fields; on error it names the field.
func eventFrom(f map[string]string) (Event, string, error) {
	var e Event
	var err error
	dur := func(s string) (time.Duration, error) {
		if s == "" {
			return 0, nil
		}
		if v, err := strconv.ParseFloat(s, 64); err == nil {
			return time.Duration(v * float64(time.Second)), nil
		}
		return time.ParseDuration(s)
	}
	atoi := func(s string) (int, error) {
		if s == "" {
			return 0, nil
		}
		return strconv.Atoi(s)
	}
	if e.At, err = dur(f["at"]); err != nil {
		return e, "at", err
	}
	e.Kind = EventKind(f["kind"])
	e.Name, e.Target, e.GPUModel, e.Data = f["name"], f["target"], f["gpu_model"], f["data"]
	if c := f["clients"]; c != "" {
		for s := range strings.SplitSeq(c, ";") {
			if s = strings.TrimSpace(s); s != "" {
				e.Clients = append(e.Clients, s)
			}
		}
	}
	if e.Replicas, err = atoi(f["replicas"]); err != nil {
		return e, "replicas", err
	}
	if e.P99, err = dur(f["p99"]); err != nil {
		return e, "p99", err
	}
	if s := f["cpu"]; s != "" {
		if e.CPU, err = policy.ParseCPU(s); err != nil {
			return e, "cpu", err
		}
	}
	if s := f["memory"]; s != "" {
		if e.Memory, err = policy.ParseBytes(s); err != nil {
			return e, "memory", err
		}
	}
	if e.GPUs, err = atoi(f["gpus"]); err != nil {
		return e, "gpus", err
	}
	if e.Nodes, err = atoi(f["nodes"]); err != nil {
		return e, "nodes", err
	}
	if s := f["bytes"]; s != "" {
		if e.Bytes, err = policy.ParseBytes(s); err != nil {
			return e, "bytes", err
		}
	}
	return e, "", nil
}

// WriteCSV writes events as a CSV trace that ReadTrace reads back.
func WriteCSV(w io.Writer, evs []Event) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvColumns); err != nil {
		return err
	}
	itoa := func(n int) string {
		if n == 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	i64 := func(n int64) string {
		if n == 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	dur := func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return d.String()
	}
	for _, e := range evs {
		cpu := ""
		if e.CPU != 0 {
			cpu = strconv.FormatInt(e.CPU, 10) + "m"
		}
		rec := []string{dur(e.At), string(e.Kind), e.Name, e.Target, itoa(e.Replicas), strings.Join(e.Clients, ";"),
			dur(e.P99), cpu, i64(e.Memory), itoa(e.GPUs), e.GPUModel, itoa(e.Nodes), e.Data, i64(e.Bytes)}
		if e.At == 0 {
			rec[0] = "0s"
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// TraceOptions shapes a generated trace. Zero fields take the defaults.
type TraceOptions struct {
	// Policies is the number of arrivals (services and training jobs).
	// Default 1000.
	Policies int
	// TrainingFraction is the share of arrivals that are training gangs.
	// Default 0.05; negative means none.
	TrainingFraction float64
	// SiteFailures and NodeFailures are the failures spread over the
	// trace. Defaults 2 and 10, fewer on a small estate (at most one edge
	// site in 20 and one node in 100, so a trace for a 7-node mesh does
	// not take every node down); negative means none.
	SiteFailures, NodeFailures int
	// Drifts is the number of drift events. Default 1% of the services.
	Drifts int
	// Seed drives every choice.
	Seed uint64
}

// Trace generates a workload over t: services with 1–4 replicas of a
// 1-core, 2 GiB model within p99 5 ms (three in ten), 20 ms (five) or
// 50 ms (two) of one edge client site, or (one in four) two of one region;
// training gangs of 1–4 nodes × 8 H100 near a dataset; edge site and node
// failures and drift spread evenly through the second half, one event per
// second of trace time.
func (t *Topology) Trace(o TraceOptions) []Event {
	if o.Policies == 0 {
		o.Policies = 1000
	}
	switch {
	case o.TrainingFraction == 0:
		o.TrainingFraction = 0.05
	case o.TrainingFraction < 0:
		o.TrainingFraction = 0
	}
	edgeSites := len(t.EdgeSites())
	if o.SiteFailures == 0 {
		o.SiteFailures = min(2, edgeSites/20)
	}
	if o.NodeFailures == 0 {
		o.NodeFailures = min(10, len(t.Nodes)/100)
	}
	if o.Drifts == 0 {
		o.Drifts = max(1, o.Policies/100)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x7ace))
	edge := t.EdgeSites()
	regionOf, byRegion := map[string]string{}, map[string][]string{}
	for _, s := range t.Sites {
		if s.Tier == placement.TierEdge {
			regionOf[s.Name] = s.Region
			byRegion[s.Region] = append(byRegion[s.Region], s.Name)
		}
	}
	// Three in ten services are latency-critical, two in ten lenient.
	p99s := []time.Duration{5, 5, 5, 20, 20, 20, 20, 20, 50, 50}
	for k := range p99s {
		p99s[k] *= time.Millisecond
	}
	var evs []Event
	var services []string
	for k := range o.Policies {
		at := time.Duration(k) * time.Second
		if rng.Float64() < o.TrainingFraction {
			e := Event{At: at, Kind: EventTraining, Name: fmt.Sprintf("job-%05d", k),
				Nodes: 1 + rng.IntN(4), GPUs: 8, GPUModel: "H100", CPU: 8000, Memory: 64 * gib}
			if len(t.Datasets) > 0 {
				e.Data, e.Bytes = t.Datasets[rng.IntN(len(t.Datasets))], 200*gib
			}
			evs = append(evs, e)
			continue
		}
		if len(edge) == 0 {
			continue
		}
		first := edge[rng.IntN(len(edge))]
		clients := []string{first}
		if near := byRegion[regionOf[first]]; rng.IntN(4) == 0 && len(near) > 1 {
			if c := near[rng.IntN(len(near))]; c != first {
				clients = append(clients, c)
			}
		}
		name := fmt.Sprintf("svc-%05d", k)
		services = append(services, name)
		evs = append(evs, Event{At: at, Kind: EventService, Name: name, Replicas: 1 + rng.IntN(4),
			Clients: clients, P99: p99s[rng.IntN(len(p99s))], CPU: 1000, Memory: 2 * gib,
			Data: fmt.Sprintf("sha256:model-%02d", rng.IntN(20)), Bytes: 500 << 20})
	}
	// Failures and drift interleave with the second half of the arrivals.
	half := time.Duration(o.Policies/2) * time.Second
	span := time.Duration(o.Policies-o.Policies/2) * time.Second
	var extra []Event
	for range max(0, o.SiteFailures) {
		if len(edge) > 0 {
			extra = append(extra, Event{Kind: EventSiteDown, Target: edge[rng.IntN(len(edge))]})
		}
	}
	for range max(0, o.NodeFailures) {
		extra = append(extra, Event{Kind: EventNodeDown, Target: t.Nodes[rng.IntN(len(t.Nodes))].Name})
	}
	for range max(0, o.Drifts) {
		if len(services) > 0 {
			extra = append(extra, Event{Kind: EventDrift, Name: services[rng.IntN(len(services))/2],
				GPUs: 1, CPU: 4000, Memory: 16 * gib})
		}
	}
	rng.Shuffle(len(extra), func(i, j int) { extra[i], extra[j] = extra[j], extra[i] })
	for k := range extra {
		extra[k].At = half + span*time.Duration(k+1)/time.Duration(len(extra)+1) + time.Millisecond
	}
	evs = append(evs, extra...)
	slices.SortStableFunc(evs, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	return evs
}
