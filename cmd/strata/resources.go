package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
	"github.com/strata-mesh/strata/policy"
)

// resource is one kind of object that get, describe and delete name. Each
// routes to the command that already lists the kind, so that get prints
// what that command prints.
type resource struct {
	// names are the plural (shown in help), the singular and short forms,
	// lower case; a kind is matched case-insensitively.
	names []string
	// list is the command that lists the kind; listArgs go before the
	// caller's arguments.
	list     func(args []string, stdout, stderr io.Writer) error
	listArgs []string
	// one shows one object, its name the first argument; nil when the
	// kind has no single view (get then refuses a name).
	one func(args []string, stdout, stderr io.Writer) error
	// describe prints one object for people; nil means one.
	describe func(ctx context.Context, c *clientFlags, name string, w io.Writer) error
	// policyKind is the policy kind objects of this resource are
	// (delete removes them); "" when they are not policies.
	policyKind string
}

// resources lists the kinds, in the order help and completion give them.
func resources() []resource {
	return []resource{
		{names: []string{"nodes", "node", "no"}, list: runNodes, one: runNode},
		{names: []string{"members", "member"}, list: runMembers},
		{names: []string{"sites", "site"}, list: runSites},
		{names: []string{"policies", "policy", "po"}, list: runPolicies, one: runPolicies, describe: describePolicy},
		{names: []string{"inferenceservices", "inferenceservice", "isvc"}, list: runPolicies, listArgs: []string{"-kind", policy.KindInferenceService},
			one: runPolicies, describe: describePolicy, policyKind: policy.KindInferenceService},
		{names: []string{"trainingjobs", "trainingjob", "tj"}, list: runPolicies, listArgs: []string{"-kind", policy.KindTrainingJob},
			one: runPolicies, describe: describePolicy, policyKind: policy.KindTrainingJob},
		{names: []string{"placements", "placement", "pl"}, list: runPlacements, one: runPlacements, describe: describePolicy},
		{names: []string{"jobs", "job"}, list: runJobs, describe: describeJob},
		{names: []string{"models", "model"}, list: runModels, one: runModels},
		{names: []string{"experiments", "experiment", "exp"}, list: runExperiments, one: runExperiments},
		{names: []string{"drift"}, list: runDrift, one: runDrift},
		{names: []string{"events", "event", "ev"}, list: runEvents, listArgs: []string{"-follow=false", "-since", "0"}},
	}
}

// lookupResource finds a kind by any of its names, case-insensitively.
func lookupResource(kind string) (resource, error) {
	k := strings.ToLower(kind)
	var plural []string
	for _, r := range resources() {
		if slices.Contains(r.names, k) {
			return r, nil
		}
		plural = append(plural, r.names[0])
	}
	return resource{}, fmt.Errorf("unknown kind %q: use one of %s", kind, strings.Join(plural, ", "))
}

// splitKindName reads "KIND/NAME" or "KIND NAME" from the positional
// arguments.
func splitKindName(pos []string) (kind, name string, ok bool) {
	switch len(pos) {
	case 1:
		kind, name, ok = strings.Cut(pos[0], "/")
		return kind, name, ok && kind != "" && name != ""
	case 2:
		return pos[0], pos[1], !strings.Contains(pos[0], "/")
	}
	return "", "", false
}

// runGet lists the objects of a kind, or shows one, through the kind's
// own command: every flag after KIND is that command's.
func runGet(args []string, stdout, stderr io.Writer) error {
	// Client flags may come before the kind (`strata -o json get
	// placements` arrives here as `-o json placements`): they go after it.
	var lead []string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-h" && args[0] != "--help" {
		name := strings.TrimLeft(args[0], "-")
		lead, args = append(lead, args[0]), args[1:]
		if globalValueFlags[name] && len(args) > 0 {
			lead, args = append(lead, args[0]), args[1:]
		}
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs := newFlags("get", "KIND [NAME] [flags of the kind's command]", stderr)
		fs.Usage()
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return &exitError{code: 1, err: fmt.Errorf("give a kind: %s", kindNames())}
	}
	r, err := lookupResource(args[0])
	if err != nil {
		return err
	}
	rest := append(args[1:len(args):len(args)], lead...)
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		if r.one == nil {
			return fmt.Errorf("strata get %s takes no NAME: try strata describe %s/%s", r.names[0], r.names[1], rest[0])
		}
		return r.one(slices.Concat(r.listArgs, rest), stdout, stderr)
	}
	return r.list(slices.Concat(r.listArgs, rest), stdout, stderr)
}

// runDescribe prints one object for people: KIND/NAME or KIND NAME.
func runDescribe(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("describe", "KIND/NAME | KIND NAME", stderr)
	c := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	kind, name, ok := splitKindName(pos)
	if !ok {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("give KIND/NAME, e.g. strata describe policy/fraud-scorer (kinds: %s)", kindNames())}
	}
	r, err := lookupResource(kind)
	if err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if r.describe == nil || c.structured() {
		if r.one == nil {
			return fmt.Errorf("%s has no single view: use strata get %s", r.names[0], r.names[0])
		}
		return r.one(slices.Concat(r.listArgs, []string{name, "-o", c.output, "-address", c.address, "-token", c.token}), stdout, stderr)
	}
	if r.policyKind != "" {
		name = r.policyKind + "/" + name
	}
	ctx, cancel := readCtx()
	defer cancel()
	return c.explain(r.describe(ctx, c, name, stdout))
}

func kindNames() string {
	var ns []string
	for _, r := range resources() {
		ns = append(ns, r.names[0])
	}
	return strings.Join(ns, ", ")
}

// matchPolicy says whether a policy key ("Kind/name") is the one a user
// named: its key or its name, the kind case-insensitive.
func matchPolicy(key, named string) bool {
	kind, name, _ := strings.Cut(key, "/")
	if k, n, ok := strings.Cut(named, "/"); ok {
		return strings.EqualFold(k, kind) && n == name
	}
	return named == name
}

// runPolicies lists the applied policies, or the one named.
func runPolicies(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("policies", "[NAME | KIND/NAME] [-kind KIND] [-o json|yaml]", stderr)
	c := addClientFlags(fs)
	kind := fs.String("kind", "", "only policies of this `kind` (InferenceService, TrainingJob)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("give at most one policy name")}
	}
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := readCtx()
	defer cancel()
	ps, err := c.client().Policies(ctx)
	if err != nil {
		return c.explain(err)
	}
	ps = slices.DeleteFunc(ps, func(p api.Policy) bool {
		return (*kind != "" && !strings.EqualFold(p.Kind, *kind)) || (len(pos) == 1 && !matchPolicy(p.Key(), pos[0]))
	})
	if len(pos) == 1 && len(ps) == 0 {
		return fmt.Errorf("no policy %s is applied", pos[0])
	}
	if c.structured() {
		if len(pos) == 1 {
			return c.emitValue(stdout, ps[0])
		}
		return c.emitValue(stdout, ps)
	}
	if len(ps) == 0 {
		fmt.Fprintln(stdout, "no policies are applied")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tGENERATION\tAPPLIED\tBY\tAT\tSITE")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.Key(), p.Generation, p.Applied.Local().Format(time.DateTime), dash(p.AppliedBy), dash(p.AppliedAt), dash(p.Site))
	}
	return tw.Flush()
}

// describePolicy prints a policy with its placement, its replicas and its
// last events, then the YAML it was applied as.
func describePolicy(ctx context.Context, c *clientFlags, named string, w io.Writer) error {
	cl := c.client()
	ps, err := cl.Policies(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ps, func(p api.Policy) bool { return matchPolicy(p.Key(), named) })
	if i < 0 {
		return fmt.Errorf("no policy %s is applied", named)
	}
	p := ps[i]
	pls, err := cl.Placements(ctx)
	if err != nil {
		return err
	}
	var evs []api.Event
	// An agent without follow=false cannot list events without waiting:
	// the description goes without them.
	_ = keptEvents(ctx, cl, 0, func(ev api.Event, _ []byte) bool {
		if ev.Policy == p.Key() {
			evs = append(evs, ev)
		}
		return true
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Policy", p.Key())
	row("Generation", fmt.Sprint(p.Generation))
	applied := p.Applied.Local().Format(time.DateTime)
	if p.AppliedBy != "" {
		applied += " by " + p.AppliedBy
	}
	if p.AppliedAt != "" {
		applied += " at " + p.AppliedAt
	}
	if p.File != "" {
		applied += " from " + p.File
	}
	row("Applied", applied)
	if p.Site != "" {
		site := p.Site
		if p.HandedFrom != "" {
			site += " (handed from " + p.HandedFrom + ")"
		}
		row("Site", site)
	}
	if j := slices.IndexFunc(pls, func(pl api.PlacementStatus) bool { return pl.Key == p.Key() || pl.Policy == p.Key() }); j >= 0 {
		pl := pls[j]
		state := pl.State
		if pl.PlacedGeneration != 0 && pl.PlacedGeneration != pl.Generation {
			state += fmt.Sprintf(" (generation %d)", pl.PlacedGeneration)
		}
		row("Placement", fmt.Sprintf("%s, owner %s, epoch %d", state, dash(pl.Owner), pl.Epoch))
		replicas := fmt.Sprintf("%d of %d wanted", len(pl.Nodes), pl.Wanted)
		if sc := pl.Scale; sc != nil && len(sc.Sites) > 0 {
			var per []string
			for _, site := range slices.Sorted(maps.Keys(sc.Sites)) {
				per = append(per, fmt.Sprintf("%s %d", site, sc.Sites[site]))
			}
			replicas += " (" + strings.Join(per, ", ") + ")"
		}
		row("Replicas", replicas)
		if sc := pl.Scale; sc != nil && (sc.From != sc.Replicas || len(sc.Sites) > 0) && sc.Reason != "" {
			row("Autoscaled", fmt.Sprintf("%d → %d at %s: %s", sc.From, sc.Replicas, sc.At.Local().Format(time.DateTime), sc.Reason))
		}
		if pl.Message != "" {
			row("Message", pl.Message)
		}
		if r := pl.Rollout; r != nil {
			row("Rollout", fmt.Sprintf("%d %s %s@%s→%s %s", r.Seq, r.Stage, r.Model, r.From, dash(r.To), r.Message))
		}
		tw.Flush()
		if len(pl.Nodes) > 0 {
			nw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			standbys := slices.ContainsFunc(pl.Nodes, func(n api.PlacedNode) bool { return n.Standby != "" })
			hdr := "  NODE\tSITE\tTIER\tRANK\tADMITTED\tREPLICA"
			if standbys {
				hdr += "\tSTANDBY"
			}
			fmt.Fprintln(nw, hdr)
			for _, n := range pl.Nodes {
				line := fmt.Sprintf("  %s\t%s\t%s\t%d\t%t\t%s", n.Name, n.Site, n.Tier, n.Rank, n.Admitted, dash(n.Replica))
				if standbys {
					line += "\t" + dash(n.Standby)
					if n.StandbyWarm {
						line += " (warm)"
					}
				}
				fmt.Fprintln(nw, line)
			}
			nw.Flush()
		}
	} else {
		row("Placement", "none yet")
	}
	tw.Flush()
	fmt.Fprintln(w, "Events:")
	if len(evs) == 0 {
		fmt.Fprintln(w, "  none kept")
	}
	show := newEventPrinter(&indent{w: w}, time.Local)
	for _, ev := range evs[max(0, len(evs)-10):] {
		show(ev)
	}
	fmt.Fprintln(w, "Source:")
	for line := range strings.Lines(strings.TrimRight(p.Source, "\n") + "\n") {
		fmt.Fprint(w, "  "+line)
	}
	return nil
}

// indent writes each line it is given two spaces in.
type indent struct{ w io.Writer }

func (i *indent) Write(p []byte) (int, error) {
	_, err := i.w.Write(append([]byte("  "), p...))
	return len(p), err
}

// describeJob prints a training job's state, where it ran and what it
// made.
func describeJob(ctx context.Context, c *clientFlags, name string, w io.Writer) error {
	j, err := c.client().Job(ctx, name)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Job", j.Name)
	row("Policy", j.Key)
	row("State", fmt.Sprintf("%s (generation %d, epoch %d)", j.State, j.Generation, j.Epoch))
	row("Launcher", j.Launcher)
	row("Nodes", dash(strings.Join(j.Nodes, ",")))
	if !j.Started.IsZero() {
		row("Started", j.Started.Local().Format(time.DateTime))
	}
	if !j.Finished.IsZero() {
		row("Finished", fmt.Sprintf("%s (%s)", j.Finished.Local().Format(time.DateTime), j.Finished.Sub(j.Started).Round(100*time.Millisecond)))
	}
	if j.RetrainOf != "" {
		row("Retrains", j.RetrainOf)
	}
	if j.Version != "" {
		row("Model", fmt.Sprintf("%s@%s %.12s", j.Model, j.Version, j.Digest))
	}
	for _, k := range sortedKeysF(j.Metrics) {
		row("Metric "+k, fmt.Sprint(j.Metrics[k]))
	}
	if j.Error != "" {
		row("Error", j.Error)
	}
	return tw.Flush()
}

func sortedKeysF(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// policyRef is one policy a delete names.
type policyRef struct{ kind, name string }

// policyKindOf returns the canonical policy kind for any name of it
// ("isvc", "InferenceService", "inferenceservices").
func policyKindOf(kind string) (string, error) {
	r, err := lookupResource(kind)
	if err == nil && r.policyKind != "" {
		return r.policyKind, nil
	}
	return "", fmt.Errorf("cannot delete %q: only policies are deleted (%s, %s)", kind, policy.KindInferenceService, policy.KindTrainingJob)
}

// refsOfFile reads the kind and metadata.name of every document of a
// policy file, in order.
func refsOfFile(body []byte, file string) ([]policyRef, error) {
	dec := yaml.NewDecoder(bytes.NewReader(body))
	var refs []policyRef
	for doc := 1; ; doc++ {
		var d struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		}
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, doc, err)
		}
		if d.Kind == "" && d.Metadata.Name == "" {
			continue // an empty document
		}
		if d.Kind == "" || d.Metadata.Name == "" {
			return nil, fmt.Errorf("%s: document %d: needs kind and metadata.name", file, doc)
		}
		kind, err := policyKindOf(d.Kind)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, doc, err)
		}
		refs = append(refs, policyRef{kind, d.Metadata.Name})
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%s: no policy documents", file)
	}
	return refs, nil
}

// runDelete deletes policies: KIND NAME, KIND/NAME (several allowed) or
// every document of -f FILE. Kinds are matched case-insensitively.
func runDelete(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("delete", "KIND/NAME ... | KIND NAME | -f FILE", stderr)
	c := addClientFlags(fs)
	file := fs.String("f", "", "delete every policy of this `file` (YAML, as applied; - for stdin)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	var refs []policyRef
	switch {
	case *file != "" && len(pos) > 0:
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("give -f FILE or KIND/NAME, not both")}
	case *file != "":
		body, name, err := readPolicyFile(*file)
		if err != nil {
			return err
		}
		if refs, err = refsOfFile(body, name); err != nil {
			return err
		}
	case len(pos) == 2 && !strings.Contains(pos[0], "/") && !strings.Contains(pos[1], "/"):
		kind, err := policyKindOf(pos[0])
		if err != nil {
			return err
		}
		refs = []policyRef{{kind, pos[1]}}
	case len(pos) > 0:
		for _, p := range pos {
			k, n, ok := strings.Cut(p, "/")
			if !ok || k == "" || n == "" {
				return &exitError{code: 1, err: fmt.Errorf("%q: give KIND/NAME, e.g. InferenceService/fraud-scorer", p)}
			}
			kind, err := policyKindOf(k)
			if err != nil {
				return err
			}
			refs = append(refs, policyRef{kind, n})
		}
	default:
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("give KIND/NAME or -f FILE, e.g. strata delete InferenceService/fraud-scorer")}
	}
	var errs []error
	for _, r := range refs {
		if err := c.client().DeletePolicy(context.Background(), r.kind, r.name); err != nil {
			var ae *client.Error
			if errors.As(err, &ae) {
				errs = append(errs, fmt.Errorf("%s/%s: %w", r.kind, r.name, err))
				continue
			}
			return c.explain(err)
		}
		fmt.Fprintf(stdout, "%s/%s deleted\n", r.kind, r.name)
	}
	return errors.Join(errs...)
}
