package catalog

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/strata-mesh/strata/mesh"
	"github.com/strata-mesh/strata/placement"
	"github.com/strata-mesh/strata/storage"
)

// Errors Authorize wraps.
var (
	// ErrNotController is a write of a table only controller-capable
	// nodes write, by a node whose certificate lacks that role.
	ErrNotController = errors.New("catalog: only controller-capable nodes write this table")
	// ErrNotAssigned is a status record of work not assigned to its
	// writer.
	ErrNotAssigned = errors.New("catalog: the work is not assigned to this node")
	// ErrImmutable is an artifact version whose digest differs from the
	// one the mesh already holds: name@version maps to one digest.
	ErrImmutable = errors.New("catalog: artifact versions are immutable")
)

// Authorize says whether w may write e: the catalog's NodeRestriction,
// set as mesh.Trust.Authorize. Every node verified by the mesh CA speaks
// only for itself:
//
//   - policies, placements, rollouts and experiments: controller-capable
//     nodes only (the owner places; the API of a controller applies);
//   - jobs and gangs: a controller, or a node the job's placement names
//     (rank 0 records its run);
//   - gang-members/JOB/NODE, drift/POLICY/NODE and drift-log/POLICY/NODE:
//     node NODE only (controllers too); a drift log must also name its
//     writer as its node and the writer's site as its site, since the
//     events every agent shows are told from it;
//   - artifacts: any node may publish a version, and its digest never
//     changes: a manifest of another digest replaces the one held only if
//     it was signed first (earlier created, then the lower digest), so
//     every agent ends on the same one whatever order they arrive in;
//     deleting one takes a controller;
//   - federation: the site's own gateways' site-scoped records, any node
//     of the site;
//   - any other table: controllers only.
func Authorize(r mesh.Reader, w mesh.Writer, e mesh.Entry) error {
	return Authorizer{}.Authorize(r, w, e)
}

// Authorizer is Authorize with the mesh's trusted signing keys: a
// manifest that verifies replaces one that does not, whatever their
// times, so a node without the signing key cannot hold a version's name
// with a manifest no agent can use.
type Authorizer struct {
	// VerifyManifest checks a manifest's signature against the trusted
	// keys; nil compares times only.
	VerifyManifest func(storage.Manifest) error
}

// Authorize is the catalog's NodeRestriction; see the function Authorize.
func (a Authorizer) Authorize(r mesh.Reader, w mesh.Writer, e mesh.Entry) error {
	table, key, _ := strings.Cut(e.Key, "/")
	switch table {
	case "policies", "placements", "rollouts", "experiments":
		if !w.Controller {
			return fmt.Errorf("%w: %s (%s)", ErrNotController, table, w.Name)
		}
	case "jobs", "gangs":
		if w.Controller {
			return nil
		}
		policyKey, err := policyOf(r, e)
		if err != nil {
			return err
		}
		var epoch uint64 // of a job's run: jobs are ordered by it (see Prefer)
		if table == "jobs" && !e.Deleted {
			var j struct {
				Epoch uint64 `json:"epoch"`
			}
			if json.Unmarshal(e.Value, &j) != nil {
				return fmt.Errorf("%w: %s does not decode", ErrNotAssigned, e.Key)
			}
			epoch = j.Epoch
		}
		return placedOn(r, policyKey, w, epoch)
	case "gang-members", "drift", "drift-log":
		if i := strings.LastIndexByte(key, '/'); i < 0 || key[i+1:] != w.Name {
			return fmt.Errorf("%w: %s is another node's record (%s)", ErrNotAssigned, e.Key, w.Name)
		}
		if table == "drift-log" && !e.Deleted {
			var l struct {
				Node string `json:"node"`
				Site string `json:"site"`
			}
			if json.Unmarshal(e.Value, &l) != nil || l.Node != w.Name || w.Site != "" && l.Site != w.Site {
				return fmt.Errorf("%w: %s names node %q of site %q, not its writer %s of %s", ErrNotAssigned, e.Key, l.Node, l.Site, w.Name, w.Site)
			}
		}
	case "artifacts":
		if e.Deleted {
			if !w.Controller {
				return fmt.Errorf("%w: deleting %s", ErrNotController, e.Key)
			}
			return nil
		}
		held, ok := r.Lookup(e.Key)
		if !ok || held.Deleted {
			return nil
		}
		was, ok1 := manifestOf(held.Value)
		now, ok2 := manifestOf(e.Value)
		if !ok1 || !ok2 || was.Digest == now.Digest {
			return nil
		}
		if a.VerifyManifest != nil {
			wasOK, nowOK := a.VerifyManifest(was) == nil, a.VerifyManifest(now) == nil
			switch {
			case nowOK && !wasOK:
				return nil
			case !nowOK:
				return fmt.Errorf("%w: %s is %s already; the manifest of %s does not verify", ErrImmutable, key, short(was.Digest), short(now.Digest))
			}
		}
		if !now.SignedBefore(was) {
			return fmt.Errorf("%w: %s is %s already (signed %s), not %s", ErrImmutable, key, short(was.Digest), was.Created.Format(time.RFC3339Nano), short(now.Digest))
		}
	case "federation":
		if e.Scope != mesh.ScopeSite && e.Scope != "" {
			return fmt.Errorf("%w: federation records stay in their site", ErrNotController)
		}
	default:
		if !w.Controller {
			return fmt.Errorf("%w: table %q", ErrNotController, table)
		}
	}
	return nil
}

// Prefer orders two versions of one key whatever order they arrive in
// (set as mesh.Config.Prefer):
//
//   - artifact manifests: of two with different digests, the one that
//     verifies against the trusted keys when only one does, else the one
//     signed first;
//   - placements: the later epoch. An owner whose view lagged (membership
//     flapped, it was cut off) and placed a policy again at an older epoch
//     does not undo the newer placement, wherever its record arrives first.
//     Of two owners' placements of one epoch (each took the policy for its
//     own while members flapped), the one whose owner ranks first for the
//     policy (placement.OwnerWeight): the agent that owns it while both are
//     live. Every agent keeps the same one, and a job placed by the agent
//     that ranks first among all it knows cannot lose its placement to a
//     rival's of the same epoch (see jobs.Config.StartQuiet);
//   - jobs: the run of the later epoch; of two records of one epoch, the
//     one that says how the run ended. A run that was superseded cannot
//     leave a "running" record over the outcome of the run that replaced
//     it.
//
// Any other pair is left to versions.
func (a Authorizer) Prefer(x, y mesh.Entry) int {
	switch {
	case strings.HasPrefix(x.Key, "placements/"):
		return preferPlacement(x, y)
	case strings.HasPrefix(x.Key, "jobs/"):
		return preferEpoch(x, y, func(j Job) (uint64, bool) { return j.Epoch, j.Terminal() })
	case !strings.HasPrefix(x.Key, "artifacts/"):
		return 0
	}
	mx, ok1 := manifestOf(x.Value)
	my, ok2 := manifestOf(y.Value)
	if !ok1 || !ok2 || mx.Digest == my.Digest {
		return 0
	}
	if a.VerifyManifest != nil {
		vx, vy := a.VerifyManifest(mx) == nil, a.VerifyManifest(my) == nil
		switch {
		case vx && !vy:
			return 1
		case vy && !vx:
			return -1
		}
	}
	if mx.SignedBefore(my) {
		return 1
	}
	return -1
}

// policyOf reads the policy key a job or gang record names, from the
// record itself (a tombstone names it through the record it deletes).
func policyOf(r mesh.Reader, e mesh.Entry) (string, error) {
	v := e.Value
	if e.Deleted {
		held, ok := r.Lookup(e.Key)
		if !ok {
			return "", fmt.Errorf("%w: deleting %s, which is not held", ErrNotAssigned, e.Key)
		}
		v = held.Value
	}
	var rec struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(v, &rec); err != nil || rec.Key == "" {
		return "", fmt.Errorf("%w: %s names no policy", ErrNotAssigned, e.Key)
	}
	return rec.Key, nil
}

// placedOn says whether the placement of policyKey names w, at an epoch
// not before epoch: a node records runs of the placements it was given,
// never of a later epoch, which would outrank (see Prefer) the record of
// every run placed after it.
func placedOn(r mesh.Reader, policyKey string, w mesh.Writer, epoch uint64) error {
	held, ok := r.Lookup("placements/" + policyKey)
	if !ok || held.Deleted {
		return fmt.Errorf("%w: no placement of %s is held here", ErrNotAssigned, policyKey)
	}
	var p struct {
		Epoch uint64       `json:"epoch"`
		Nodes []PlacedNode `json:"nodes"`
	}
	if err := json.Unmarshal(held.Value, &p); err != nil {
		return fmt.Errorf("%w: the placement of %s does not decode", ErrNotAssigned, policyKey)
	}
	if epoch > p.Epoch {
		return fmt.Errorf("%w: a run of %s at epoch %d, after the placement's %d", ErrNotAssigned, policyKey, epoch, p.Epoch)
	}
	for _, n := range p.Nodes {
		if n.ID == w.ID || (n.ID == "" && n.Name == w.Name) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is not placed on %s", ErrNotAssigned, policyKey, w.Name)
}

// preferPlacement orders two placements of one policy: by epoch, then by
// how their owners rank for the policy. Records that do not decode, and
// two of one owner, are left to versions.
func preferPlacement(x, y mesh.Entry) int {
	var px, py Placement
	if json.Unmarshal(x.Value, &px) != nil || json.Unmarshal(y.Value, &py) != nil {
		return 0
	}
	switch {
	case px.Epoch != py.Epoch:
		return cmp.Compare(px.Epoch, py.Epoch)
	case px.Owner == py.Owner:
		return 0
	}
	// The policy's key, as placement.Owner hashes it (the record's Key
	// field is its writer's word; the entry's key is what is stored).
	key := strings.TrimPrefix(x.Key, "placements/")
	wx, wy := placement.OwnerWeight(key, px.Owner), placement.OwnerWeight(key, py.Owner)
	if wx == wy { // as placement.Owner breaks a tie: the lower name
		return strings.Compare(py.Owner, px.Owner)
	}
	return cmp.Compare(wx, wy)
}

// preferEpoch orders two records by the epoch key returns, then by
// whether they are final (ended beats running). Records that do not
// decode are left to versions.
func preferEpoch[T any](x, y mesh.Entry, key func(T) (epoch uint64, final bool)) int {
	var vx, vy T
	if json.Unmarshal(x.Value, &vx) != nil || json.Unmarshal(y.Value, &vy) != nil {
		return 0
	}
	ex, fx := key(vx)
	ey, fy := key(vy)
	switch {
	case ex != ey:
		return cmp.Compare(ex, ey)
	case fx && !fy:
		return 1
	case fy && !fx:
		return -1
	}
	return 0
}

func manifestOf(v json.RawMessage) (storage.Manifest, bool) {
	var m storage.Manifest
	if json.Unmarshal(v, &m) != nil || m.Digest == "" {
		return m, false
	}
	return m, true
}

func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
