package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/internal/catalog"
	"github.com/strata-mesh/strata/internal/httpjson"
	"github.com/strata-mesh/strata/internal/meshview"
	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
)

// evaluation is what this agent concludes of one policy against its view
// of the mesh. Plan and apply both evaluate a policy this way, so that an
// apply refuses what a plan refuses and warns of what a plan warns of.
type evaluation struct {
	req *placement.Request
	// dec is the dry-run decision; nil while a client site of the
	// policy has no RTT estimate yet or is unreachable (unmeasured says
	// which).
	dec        *placement.Decision
	unmeasured error
	// handOff is the site an apply would hand the policy to (federated):
	// no node of this site can take it.
	handOff *api.HandOff
	// burst are the replicas a service with burst would overflow to
	// (meshview.Overflow): what dec could not place within its tiers.
	burst []placement.Placement
	// warnings say what the policy would wait for: a model or dataset not
	// published, room the mesh has not got now, a client site not
	// measured yet. None stops an apply.
	warnings []string
}

// refusal is why a policy is refused: the status, the field at fault and
// what to change.
type refusal struct {
	code  int
	field string
	err   error
	// parse: err is a policy.ErrorList, answered with every problem and
	// its position.
	parse bool
}

func (f *refusal) write(w http.ResponseWriter) {
	if f.parse {
		writePolicyError(w, f.err)
		return
	}
	httpjson.Error(w, f.code, f.field, "%v", f.err)
}

// evaluate compiles p, checks it against the mesh's schema gates and runs
// the placement engine on a snapshot of nodes (and, federated, the other
// sites as client sites). A policy that does not compile, that uses a
// feature not every agent reads yet, or that names a client site or
// region no node is in, is refused; one that cannot be placed now, or
// refers to what is not published, is evaluated with warnings.
func (s *Server) evaluate(p catalog.Policy, nodes []mesh.Node, remote []placement.RemoteClient) (*evaluation, *refusal) {
	req, err := s.cfg.Compile(p)
	if err != nil {
		return nil, &refusal{code: http.StatusBadRequest, err: err, parse: true}
	}
	doc, err := p.Document()
	if err != nil {
		return nil, &refusal{code: http.StatusBadRequest, err: err, parse: true}
	}
	var ge *GateError
	if err := policyGate(doc, nodes); errors.As(err, &ge) {
		return nil, &refusal{code: http.StatusConflict, field: ge.Field, err: fmt.Errorf("%s: %w", p.Key(), err)}
	}
	snap, err := meshview.Snapshot(nodes, p.Key(), remote...)
	if err != nil {
		return nil, &refusal{code: http.StatusInternalServerError, err: err}
	}
	ev := &evaluation{req: req}
	dec, err := placement.Place(snap, req)
	if f := placeRefusal(p.Key(), err); f != nil {
		return nil, f
	}
	if err != nil {
		// Right after the agents start, or while a client site is
		// cut off: not the policy's fault.
		ev.unmeasured = fmt.Errorf("%s: %w", p.Key(), err)
		then := "it is placed once they have"
		if errors.Is(err, placement.ErrClientUnreachable) {
			then = "it is placed once the site is back"
		}
		ev.warnings = append(ev.warnings, fmt.Sprintf("%v: %s", ev.unmeasured, then))
	}
	if err == nil {
		ev.dec = dec
	}
	ev.warnings = append(ev.warnings, s.missing(p)...)
	ev.warnings = append(ev.warnings, s.referenceWarnings(p)...)
	if ev.dec == nil {
		return ev, nil
	}
	// As the controller does (see Controller.handOff): a policy no node
	// here can take goes to a site whose summary shows room.
	if s.cfg.HandOff != nil && (len(dec.Placements) == 0 || req.Kind == placement.Training && !dec.Feasible) {
		if site, because := s.cfg.HandOff(p, req); site != "" {
			ev.handOff = &api.HandOff{Site: site, Why: because}
			return ev, nil
		}
	}
	if svc := doc.InferenceService; svc != nil && svc.Burst != nil && len(dec.Placements) < dec.Wanted {
		ev.burst = meshview.Overflow(snap, req, dec, svc.Burst)
	}
	if w := infeasible(p.Key(), req, dec, len(ev.burst)); w != "" {
		ev.warnings = append(ev.warnings, w)
	}
	return ev, nil
}

// placeRefusal maps an error of placement.Place to a refusal: nil for
// none, and for placement.ErrClientNotMeasured, which is the mesh's state
// rather than the policy's fault.
func placeRefusal(key string, err error) *refusal {
	switch {
	case err == nil, errors.Is(err, placement.ErrClientNotMeasured), errors.Is(err, placement.ErrClientUnreachable):
		return nil
	case errors.Is(err, placement.ErrUnknownClient):
		return &refusal{code: http.StatusBadRequest, field: "spec.latency.clients", err: fmt.Errorf("%s: %w: name a site or region of the mesh (strata sites)", key, err)}
	default:
		return &refusal{code: http.StatusBadRequest, err: fmt.Errorf("%s: %w", key, err)}
	}
}

// infeasible warns that dec, with burst replicas overflowing beside it,
// places less than req wants, as the controller would find it now: ""
// when it places everything.
func infeasible(key string, req *placement.Request, dec *placement.Decision, burst int) string {
	why := meshview.SummarizeRejections(meshview.Rejections(dec.Rejected), meshview.Fallbacks(dec.Fallbacks))
	placed := len(dec.Placements) + burst
	switch {
	case dec.Feasible || placed >= dec.Wanted && dec.Wanted > 0:
		return ""
	case placed == 0 || req.Kind == placement.Training:
		return fmt.Sprintf("no node can take %s now (%s): its placement fails until the mesh changes (strata plan explains)", key, why)
	default:
		return fmt.Sprintf("only %d of %d replicas of %s can be placed now (%s): the rest wait for room", placed, dec.Wanted, key, strings.TrimSpace(why))
	}
}
