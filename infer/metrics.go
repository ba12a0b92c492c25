package infer

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	batch    *prometheus.HistogramVec
	rejected *prometheus.CounterVec
	standby  *prometheus.CounterVec
	spilled  *prometheus.CounterVec
	standbys *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "strata", Subsystem: "infer", Name: "requests_total",
			Help: "Inference requests by model, version and HTTP status code; requests for models not served here have empty model and version, and code \"forwarded\" when the forwarder answered them.",
		}, []string{"model", "version", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "strata", Subsystem: "infer", Name: "request_duration_seconds",
			Help:    "Inference request latency, from body read to response written.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"model", "version"}),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "strata", Subsystem: "infer", Name: "batch_rows",
			Help:    "Rows per ONNX Runtime session call (batched requests share one call).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}, []string{"model", "version"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "strata", Subsystem: "infer", Name: "rejected_total",
			Help: "Inference requests refused before their body was read: too_large (Content-Length over the limit, 413) or busy (request bytes in flight at their cap, 429).",
		}, []string{"reason"}),
		standby: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "strata", Subsystem: "infer", Name: "standby_answers_total",
			Help: "Inference requests answered by a standby loaded here because forwarding them to a replica failed.",
		}, []string{"model", "version"}),
		spilled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "strata", Subsystem: "infer", Name: "spilled_total",
			Help: "Inference requests for a model version served here that another replica answered: SpillInflight of them were in flight here already.",
		}, []string{"model", "version"}),
		standbys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "strata", Subsystem: "infer", Name: "standby_loaded",
			Help: "1 for each model version loaded here as a standby (warm), ready to answer when no replica does.",
		}, []string{"model", "version"}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.batch, m.rejected, m.standby, m.spilled, m.standbys} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}
