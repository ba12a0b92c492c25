package agent

import (
	"net/http"
	"os"

	"github.com/strata-mesh/strata/internal/httpjson"

	"github.com/strata-mesh/strata/infer"
)

// openInference starts the ONNX Runtime server; without the library it
// returns nil and the reason, which /v2 then answers with.
func (a *Agent) openInference() (*infer.Server, error) {
	lib := a.cfg.ORTLibrary
	if lib == "" {
		lib = os.Getenv("STRATA_ORT_LIB")
	}
	return infer.New(infer.Config{
		NodeName:       a.cfg.Name,
		LibraryPath:    lib,
		SampleFraction: a.cfg.SampleFraction,
		Observer:       func(model string, rows []infer.Sample) { a.drift.Observe(model, rows) }, // a.drift is set before Run
		Forwarder:      forwarderOf{a},
		Registerer:     a.reg,
		Logger:         a.log,
	})
}

// handleV2 serves the Open Inference Protocol, or says why it cannot.
func (a *Agent) handleV2(w http.ResponseWriter, r *http.Request) {
	if a.inf == nil {
		httpjson.Error(w, http.StatusServiceUnavailable, "", "inference is not available on this agent: %v", a.infErr)
		return
	}
	a.inf.Handler().ServeHTTP(w, r)
}

// forwarderOf hands the inference server's forwards to the agent's
// forwarder, made after the server (it needs the mesh).
type forwarderOf struct{ a *Agent }

func (f forwarderOf) Forward(w http.ResponseWriter, r *http.Request, model, version string) error {
	return f.a.fwd.Forward(w, r, model, version)
}

// peerRoutes are the requests other agents send this one over the data
// plane: inference forwarded to a replica here, and the logs of a job that
// ran here.
func (a *Agent) peerRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v2/", a.handleV2)
	mux.HandleFunc("GET /v1/jobs/{name}/logs", a.handleJobLogs)
	return mux
}
