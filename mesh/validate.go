package mesh

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/serf/coordinate"
)

// Bounds on what a peer's record may say. A record past one is refused
// and counted (strata_gossip_records_refused_total{reason="invalid"}),
// never merged: peer data must not be able to crash or mislead an agent.
const (
	// maxNameLen bounds node names, IDs, sites and other short strings.
	maxNameLen = 253
	// maxKeyLen bounds catalog keys.
	maxKeyLen = 1024
	// maxListLen bounds the lists of a node document (GPUs, models,
	// assignments, held artifacts).
	maxListLen = 4096
	// maxCoordComponent bounds a Vivaldi coordinate's components, height
	// and adjustment, in seconds: no RTT on Earth is near it.
	maxCoordComponent = 100.0
)

// coordDims is the dimensionality of every Vivaldi coordinate in the mesh.
var coordDims = coordinate.DefaultConfig().Dimensionality

// DefaultMaxClockSkew is how far in the future a record's version (its
// writer's clock in microseconds) may be before it is refused; see
// Config.MaxClockSkew.
const DefaultMaxClockSkew = 2 * time.Minute

// versionLimit is the highest version a record may carry now.
func (m *Mesh) versionLimit(now time.Time) uint64 {
	return uint64(now.Add(m.cfg.MaxClockSkew).UnixMicro())
}

// ValidCoordinate reports whether c is a coordinate this mesh can compute
// with: the mesh's dimensionality, every component finite and within
// bounds. A coordinate of other dimensions panics in DistanceTo.
func ValidCoordinate(c *coordinate.Coordinate) error {
	if c == nil {
		return nil
	}
	if len(c.Vec) != int(coordDims) {
		return fmt.Errorf("coordinate has %d dimensions, not %d", len(c.Vec), coordDims)
	}
	ok := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && math.Abs(v) <= maxCoordComponent }
	for _, v := range c.Vec {
		if !ok(v) {
			return fmt.Errorf("coordinate component %v out of bounds", v)
		}
	}
	if !ok(c.Height) || c.Height < 0 || !ok(c.Adjustment) || !ok(c.Error) || c.Error < 0 {
		return fmt.Errorf("coordinate height, error or adjustment out of bounds")
	}
	return nil
}

func validName(what, s string, required bool) error {
	switch {
	case s == "" && required:
		return fmt.Errorf("%s is empty", what)
	case len(s) > maxNameLen:
		return fmt.Errorf("%s is %d bytes, over %d", what, len(s), maxNameLen)
	case !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%s %q holds control characters", what, s)
	}
	return nil
}

// ValidSiteName says whether s is a site name a document may carry (in
// its site, or as a client site of its traffic): not empty, at most 253
// bytes, UTF-8 without control characters.
func ValidSiteName(s string) bool { return validName("site", s, true) == nil }

func validAddr(what, a string) error {
	if a == "" {
		return nil
	}
	if _, _, err := splitHostPort(a); err != nil || len(a) > maxNameLen {
		return fmt.Errorf("%s %q is not host:port", what, a)
	}
	return nil
}

// validateState checks a peer's document against the bounds above and
// the version limit.
func (m *Mesh) validateState(s *NodeState, now time.Time) *refusal {
	if s.Version > m.versionLimit(now) {
		return refuse(refuseFuture, "document of %s: version %d is more than %s ahead of this clock", s.Name, s.Version, m.cfg.MaxClockSkew)
	}
	err := func() error {
		for _, f := range []struct{ what, v string }{{"id", s.ID}, {"name", s.Name}} {
			if err := validName(f.what, f.v, true); err != nil {
				return err
			}
		}
		for _, f := range []struct{ what, v string }{{"site", s.Site}, {"region", s.Region}, {"tier", s.Tier}} {
			if err := validName(f.what, f.v, false); err != nil {
				return err
			}
		}
		if s.Tier != "" && !ValidTier(s.Tier) {
			return fmt.Errorf("tier %q is not edge, onprem or cloud", s.Tier)
		}
		if err := ValidCoordinate(s.Coord); err != nil {
			return err
		}
		for _, a := range []struct{ what, v string }{{"gossip address", s.Addrs.Gossip}, {"API address", s.Addrs.API}, {"data address", s.Addrs.Data}} {
			if err := validAddr(a.what, a.v); err != nil {
				return err
			}
		}
		c, l := s.Capabilities, s.Load
		if c.CPU.Cores < 0 || c.CPU.Millicores < 0 || c.Memory.Total < 0 || l.FreeCPU < 0 || l.FreeMemory < 0 ||
			l.FreeGPUs < 0 || l.Workloads < 0 || math.IsNaN(l.QPS) || math.IsInf(l.QPS, 0) || l.QPS < 0 {
			return fmt.Errorf("negative or non-finite capacity or load")
		}
		for _, g := range c.GPUs {
			if g.Memory < 0 || g.Index < 0 {
				return fmt.Errorf("GPU %d: negative index or memory", g.Index)
			}
		}
		for _, n := range []int{len(c.GPUs), len(c.RDMA), len(s.Models), len(s.Replicas), len(s.Standbys), len(s.Traffic), len(s.Assignments),
			len(s.Locality.Artifacts), len(s.Locality.Datasets), len(s.Locality.Pulling), len(s.Labels), len(s.Addrs.Federation)} {
			if n > maxListLen {
				return fmt.Errorf("a list of %d items, over %d", n, maxListLen)
			}
		}
		for _, t := range s.Traffic {
			for _, v := range []float64{t.RPS, t.P50, t.P99, float64(t.Inflight)} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					return fmt.Errorf("traffic of %.64q: negative or non-finite figure", t.Model)
				}
			}
			if len(t.Sites) > MaxTrafficSites {
				return fmt.Errorf("traffic of %.64q: %d client sites, over %d", t.Model, len(t.Sites), MaxTrafficSites)
			}
			for site, v := range t.Sites {
				if err := validName("traffic's client site", site, true); err != nil {
					return err
				}
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					return fmt.Errorf("traffic of %.64q from %.64q: negative or non-finite figure", t.Model, site)
				}
			}
		}
		for _, a := range s.Assignments {
			if a.CPU < 0 || a.Memory < 0 {
				return fmt.Errorf("assignment %s: negative resources", a.Key)
			}
		}
		return nil
	}()
	if err != nil {
		return refuse(refuseInvalid, "document of %q: %v", s.Name, err)
	}
	return nil
}

// validateEntry checks a peer's catalog entry: a key, an origin, and a
// version and write time not from the future.
func (m *Mesh) validateEntry(e *Entry, now time.Time) *refusal {
	switch {
	case e.Key == "" || len(e.Key) > maxKeyLen || strings.ContainsRune(e.Key, 0) || !utf8.ValidString(e.Key):
		return refuse(refuseInvalid, "entry key %.64q", e.Key)
	case validName("origin", e.Origin, true) != nil:
		return refuse(refuseInvalid, "entry %s: origin %.64q", e.Key, e.Origin)
	case e.Version > m.versionLimit(now) || e.Written.After(now.Add(m.cfg.MaxClockSkew)):
		return refuse(refuseFuture, "entry %s: version %d is more than %s ahead of this clock", e.Key, e.Version, m.cfg.MaxClockSkew)
	case e.Version == 0:
		return refuse(refuseInvalid, "entry %s: version 0", e.Key)
	}
	return nil
}
