package agent

import (
	"net/http"

	"github.com/strata-mesh/strata/infer"
	"github.com/strata-mesh/strata/internal/serving"
)

// openInference starts the ONNX Runtime server; without the library it
// returns nil and the reason, which /v2 then answers with.
func (a *Agent) openInference() (*infer.Server, error) {
	return infer.New(infer.Config{
		NodeName:       a.cfg.Name,
		LibraryPath:    infer.ConfiguredLibrary(a.cfg.ORTLibrary),
		SampleFraction: a.cfg.SampleFraction,
		SpillInflight:  a.cfg.SpillInflight,
		Observer:       func(model string, rows []infer.Sample) { a.drift.Observe(model, rows) }, // a.drift is set before Run
		Forwarder:      forwarderOf{a},
		Origin:         func(r *http.Request) string { return serving.ClientSite(r, a.cfg.Site) },
		Registerer:     a.reg,
		Logger:         a.log,
	})
}

// forwarderOf hands the inference server's forwards to the agent's
// forwarder, made after the server (it needs the mesh).
type forwarderOf struct{ a *Agent }

func (f forwarderOf) Forward(w http.ResponseWriter, r *http.Request, model, version string) error {
	return f.a.fwd.Forward(w, r, model, version)
}
