package agent

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/strata-mesh/strata/mesh"
)

// Reloaded says what a configuration reload did, by the settings' YAML
// names.
type Reloaded struct {
	// Applied are the settings that changed and are now in force.
	Applied []string `json:"applied"`
	// NeedRestart are the settings that changed but take effect only when
	// the agent starts again.
	NeedRestart []string `json:"need_restart"`
}

// reloadable are the settings Reload applies to a running agent.
var reloadable = map[string]bool{
	"labels": true, "log_level": true, "api_token": true, "api_token_file": true, "acl_tokens": true,
}

// Reload applies a new configuration to the running agent (SIGHUP): the
// node's labels (gossiped, so placement sees them at once), the log level
// and the API's tokens (api_token, api_token_file read again, acl_tokens).
// Every other setting that changed is reported in NeedRestart and left as
// it started. A configuration that does not validate changes nothing.
// Each reload is counted in strata_config_reloads_total by result, and
// a failed one is logged.
func (a *Agent) Reload(next Config) (Reloaded, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	r, err := a.reload(next)
	a.countReload(err)
	return r, err
}

// ReloadFrom reads the configuration with load (the config file and
// flags, as at start) and reloads it; a configuration that cannot be read
// counts as a failed reload.
func (a *Agent) ReloadFrom(load func() (Config, error)) (Reloaded, error) {
	next, err := load()
	if err != nil {
		a.reloadMu.Lock()
		defer a.reloadMu.Unlock()
		a.countReload(err)
		return Reloaded{}, err
	}
	return a.Reload(next)
}

func (a *Agent) countReload(err error) {
	if err != nil {
		a.reloads.WithLabelValues("error").Inc()
		a.log.Error("configuration not reloaded: the running one stays", "err", err)
		return
	}
	a.reloads.WithLabelValues("ok").Inc()
}

func (a *Agent) reload(next Config) (Reloaded, error) {
	next.EnsureDefaults()
	if err := next.loadSecrets(); err != nil {
		return Reloaded{}, err
	}
	if err := next.Validate(); err != nil {
		return Reloaded{}, err
	}
	tokens, err := next.apiTokens()
	if err != nil {
		return Reloaded{}, err
	}
	cur := a.cfg
	var r Reloaded
	if !maps.Equal(cur.Labels, next.Labels) {
		labels := maps.Clone(next.Labels)
		if err := a.mesh.Update(func(s *mesh.NodeState) { s.Labels = labels }); err != nil {
			return r, fmt.Errorf("reload: labels: %w", err)
		}
		a.cfg.Labels = labels
		r.Applied = append(r.Applied, "labels")
	}
	if cur.LogLevel != next.LogLevel {
		if a.level == nil {
			r.NeedRestart = append(r.NeedRestart, "log_level") // the caller's logger
		} else {
			lvl, _ := parseLevel(next.LogLevel) // validated
			a.level.Set(lvl)
			a.cfg.LogLevel = next.LogLevel
			r.Applied = append(r.Applied, "log_level")
		}
	}
	tokenChanged, aclChanged := cur.APIToken != next.APIToken, !reflect.DeepEqual(cur.ACLTokens, next.ACLTokens)
	if tokenChanged || aclChanged {
		a.api.SetTokens(tokens)
		a.cfg.APIToken, a.cfg.APITokenFile, a.cfg.ACLTokens = next.APIToken, next.APITokenFile, next.ACLTokens
		if tokenChanged {
			r.Applied = append(r.Applied, "api_token")
		}
		if aclChanged {
			r.Applied = append(r.Applied, "acl_tokens")
		}
	}
	cv, nv := reflect.ValueOf(cur), reflect.ValueOf(next)
	for i := range cv.NumField() {
		name, _, _ := strings.Cut(cv.Type().Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" || reloadable[name] {
			continue
		}
		if !reflect.DeepEqual(cv.Field(i).Interface(), nv.Field(i).Interface()) {
			r.NeedRestart = append(r.NeedRestart, name)
		}
	}
	slices.Sort(r.NeedRestart)
	switch {
	case len(r.Applied) == 0 && len(r.NeedRestart) == 0:
		a.log.Info("configuration reloaded: nothing changed")
	case len(r.NeedRestart) > 0:
		a.log.Warn("configuration reloaded; some changes need a restart", "applied", r.Applied, "need_restart", r.NeedRestart)
	default:
		a.log.Info("configuration reloaded", "applied", r.Applied)
	}
	return r, nil
}
