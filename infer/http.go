package infer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"
)

// HeaderServedBy names the response header that carries Config.NodeName.
const HeaderServedBy = "Strata-Served-By"

// HeaderForwardedBy marks a request another agent forwarded here: it is
// answered here or refused, never forwarded or spilled again.
const HeaderForwardedBy = "Strata-Forwarded-By"

// Handler returns the Open Inference Protocol (v2) endpoints, to be mounted
// at /v2/ (the paths it matches include the /v2 prefix):
//
//	GET  /v2                                  server metadata
//	GET  /v2/health/live, /v2/health/ready    liveness, readiness
//	GET  /v2/models/{name}[/versions/{v}]     model metadata
//	GET  /v2/models/{name}[/versions/{v}]/ready
//	POST /v2/models/{name}[/versions/{v}]/infer
//
// Infer bodies are JSON, or use the binary tensor data extension: with an
// Inference-Header-Content-Length header, the body is that many bytes of
// JSON followed by the raw little-endian data of each input whose
// "parameters" carry "binary_data_size". Outputs come back binary when the
// request's parameters set "binary_data_output": true or an output asks for
// "binary_data": true; the reply then carries the same header.
//
// Errors are JSON {"error": "..."}: 400 for a request that does not fit the
// model, 404 for a model not served (after the Forwarder, if any, declined),
// 413 for a body over Config.MaxRequestBytes, 500 otherwise. A panic in a
// handler is recovered and answered with 500.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2", s.serverMeta)
	mux.HandleFunc("GET /v2/{$}", s.serverMeta)
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"live": true})
	})
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, r *http.Request) {
		s.mu.RLock()
		ready := !s.closed
		s.mu.RUnlock()
		code := http.StatusOK
		if !ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]bool{"ready": ready})
	})
	for _, p := range []string{"/v2/models/{name}", "/v2/models/{name}/versions/{version}"} {
		mux.HandleFunc("GET "+p, s.modelMeta)
		mux.HandleFunc("GET "+p+"/ready", s.modelReady)
		mux.HandleFunc("POST "+p+"/infer", s.serveInfer)
	}
	mux.HandleFunc("/v2/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderServedBy, s.cfg.NodeName)
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("inference handler panicked", "path", r.URL.Path, "panic", fmt.Sprint(p))
				writeError(w, http.StatusInternalServerError, fmt.Errorf("internal error: %v", p))
			}
		}()
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) serverMeta(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"name":       "strata",
		"version":    RuntimeVersion(),
		"extensions": []string{"binary_tensor_data"},
	})
}

// local acquires the model named in r's path, or hands r to the Forwarder
// (and, when that fails, answers from a standby loaded here). It returns
// nil when the response has been written, with a label for the requests
// metric: "forwarded" or the status code written.
func (s *Server) local(w http.ResponseWriter, r *http.Request) (*version, string) {
	name, ver := r.PathValue("name"), r.PathValue("version")
	v, err := s.acquire(name, ver)
	if err == nil {
		return v, ""
	}
	if sb := s.standby(name, ver); sb != nil && errors.Is(err, ErrModelNotFound) {
		if s.cfg.Forwarder == nil {
			return sb, ""
		}
		sb, err := s.forwardOrStandby(w, r, sb, name, ver)
		switch {
		case sb != nil:
			return sb, ""
		case err == nil:
			return nil, "forwarded"
		}
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
		}
		return nil, strconv.Itoa(writeError(w, code, err))
	} else if sb != nil {
		sb.release()
	}
	code := http.StatusNotFound
	switch {
	case errors.Is(err, ErrModelNotFound) && s.cfg.Forwarder != nil:
		ferr := s.cfg.Forwarder.Forward(w, r, name, ver)
		switch {
		case ferr == nil:
			return nil, "forwarded"
		case errors.Is(ferr, ErrModelNotFound):
			err = ferr
		case errors.Is(ferr, ErrModelNotReady):
			// Loading somewhere, or failed to load there: 503, as
			// docs/api.md says, not a gateway error.
			code, err = http.StatusServiceUnavailable, ferr
		default:
			code, err = http.StatusBadGateway, fmt.Errorf("forward %s: %w", modelRef(name, ver), ferr)
		}
	case errors.Is(err, ErrClosed):
		code = http.StatusServiceUnavailable
	}
	return nil, strconv.Itoa(writeError(w, code, err))
}

type jsonModelMeta struct {
	Name     string       `json:"name"`
	Versions []string     `json:"versions"`
	Platform string       `json:"platform"`
	Inputs   []TensorInfo `json:"inputs"`
	Outputs  []TensorInfo `json:"outputs"`
}

func (s *Server) modelMeta(w http.ResponseWriter, r *http.Request) {
	v, _ := s.local(w, r)
	if v == nil {
		return
	}
	defer v.release()
	writeJSON(w, http.StatusOK, jsonModelMeta{
		Name:     v.info.Name,
		Versions: []string{v.info.Version},
		Platform: "onnxruntime",
		Inputs:   v.info.Inputs,
		Outputs:  v.info.Outputs,
	})
}

func (s *Server) modelReady(w http.ResponseWriter, r *http.Request) {
	v, _ := s.local(w, r)
	if v == nil {
		return
	}
	defer v.release()
	writeJSON(w, http.StatusOK, map[string]any{"name": v.info.Name, "version": v.info.Version, "ready": true})
}

type jsonInferRequest struct {
	ID         string          `json:"id"`
	Inputs     []jsonTensorIn  `json:"inputs"`
	Outputs    []jsonOutputReq `json:"outputs"`
	Parameters struct {
		BinaryDataOutput bool `json:"binary_data_output"`
	} `json:"parameters"`
}

type jsonTensorIn struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Data       json.RawMessage `json:"data"`
	Parameters struct {
		BinaryDataSize *int64 `json:"binary_data_size"`
	} `json:"parameters"`
}

type jsonOutputReq struct {
	Name       string `json:"name"`
	Parameters struct {
		BinaryData *bool `json:"binary_data"`
	} `json:"parameters"`
}

func (s *Server) serveInfer(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Bound the bytes in flight before reading any: a body that says it
	// is too large is refused unread, and one that does not fit beside the
	// requests already in flight waits for the client to retry.
	if r.ContentLength > s.cfg.MaxRequestBytes {
		s.metrics.rejected.WithLabelValues("too_large").Inc()
		s.metrics.requests.WithLabelValues("", "", "413").Inc()
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body of %d bytes is over the %d-byte limit", r.ContentLength, s.cfg.MaxRequestBytes))
		return
	}
	size := r.ContentLength
	if size < 0 {
		size = s.cfg.MaxRequestBytes
	}
	release, ok := s.budget.reserve(r.PathValue("name"), size)
	if !ok {
		s.metrics.rejected.WithLabelValues("busy").Inc()
		s.metrics.requests.WithLabelValues("", "", "429").Inc()
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Errorf("too many request bytes in flight (at most %d on this agent, %d for one model): retry shortly", s.cfg.MaxInflightBytes, s.cfg.MaxModelInflightBytes))
		return
	}
	defer release()
	if size >= largeRequest {
		// After the answer (deferred calls run last first).
		defer s.returnMemory()
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes)
	v, label := s.local(w, r)
	if v == nil {
		// Not served here: the model label stays empty, since the name came
		// from the client and would let it mint series.
		s.metrics.requests.WithLabelValues("", "", label).Inc()
		return
	}
	st := s.statsOf(v.info.Name, v.info.Version)
	if n := st.inflight.Load(); s.cfg.Forwarder != nil && s.cfg.SpillInflight > 0 && r.Header.Get(HeaderForwardedBy) == "" &&
		(n >= int64(s.cfg.SpillInflight) || st.slow(start)) && s.spill(w, r, v, n) {
		return
	}
	defer v.release()
	origin := ""
	if s.cfg.Origin != nil {
		origin = s.cfg.Origin(r)
	}
	done := st.begin(origin)
	code := s.inferHTTP(w, r, v)
	done(code)
	s.metrics.requests.WithLabelValues(v.info.Name, v.info.Version, strconv.Itoa(code)).Inc()
	s.metrics.latency.WithLabelValues(v.info.Name, v.info.Version).Observe(time.Since(start).Seconds())
}

func (s *Server) inferHTTP(w http.ResponseWriter, r *http.Request, v *version) int {
	body, err := readBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes), r.ContentLength)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body is over the %d-byte limit", tooBig.Limit))
		}
		return writeError(w, http.StatusBadRequest, fmt.Errorf("read request body: %w", err))
	}
	header, rest := body, []byte(nil)
	if hl := r.Header.Get(headerLengthKey); hl != "" {
		n, err := strconv.Atoi(hl)
		if err != nil || n < 0 || n > len(body) {
			return writeError(w, http.StatusBadRequest, fmt.Errorf("%s is %q; want a length from 0 to the body's %d bytes", headerLengthKey, hl, len(body)))
		}
		header, rest = body[:n], body[n:]
	}
	var jr jsonInferRequest
	if err := json.Unmarshal(header, &jr); err != nil {
		return writeError(w, http.StatusBadRequest, fmt.Errorf("request body is not a valid inference request: %w", err))
	}
	req := Request{Model: v.info.Name, Version: v.info.Version, ID: jr.ID, Inputs: make([]Tensor, len(jr.Inputs))}
	for i, in := range jr.Inputs {
		n, err := elements(in.Shape)
		if err != nil {
			return writeError(w, http.StatusBadRequest, fmt.Errorf("input %q: %w", in.Name, err))
		}
		var data any
		if size := in.Parameters.BinaryDataSize; size != nil {
			if *size < 0 || *size > int64(len(rest)) {
				return writeError(w, http.StatusBadRequest, fmt.Errorf("input %q: binary_data_size %d is more than the %d binary bytes left in the body (is %s set?)", in.Name, *size, len(rest), headerLengthKey))
			}
			data, err = decodeBinary(Datatype(in.Datatype), rest[:*size], n)
			rest = rest[*size:]
		} else {
			data, err = parseData(Datatype(in.Datatype), in.Data, n)
		}
		if err != nil {
			return writeError(w, http.StatusBadRequest, fmt.Errorf("input %q: %w", in.Name, err))
		}
		req.Inputs[i] = Tensor{Name: in.Name, Datatype: Datatype(in.Datatype), Shape: in.Shape, Data: data}
	}
	if len(rest) > 0 {
		return writeError(w, http.StatusBadRequest, fmt.Errorf("%d bytes of binary data follow the header that no input's binary_data_size claims", len(rest)))
	}
	// The request's bytes are parsed: let them go before the model runs
	// (jr is read again below, for its outputs only).
	jr.Inputs = nil
	binaryOut := map[string]bool{}
	for _, o := range jr.Outputs {
		req.Outputs = append(req.Outputs, o.Name)
		if b := o.Parameters.BinaryData; b != nil {
			binaryOut[o.Name] = *b
		}
	}
	resp, err := s.infer(r.Context(), v, &req)
	if err != nil {
		return writeError(w, statusOf(err), err)
	}
	asBinary := func(name string) bool {
		if b, ok := binaryOut[name]; ok {
			return b
		}
		return jr.Parameters.BinaryDataOutput
	}
	var bin []byte
	buf := make([]byte, 0, 256)
	buf = append(buf, `{"model_name":`...)
	buf = appendString(buf, resp.Model)
	buf = append(buf, `,"model_version":`...)
	buf = appendString(buf, resp.Version)
	if resp.ID != "" {
		buf = append(buf, `,"id":`...)
		buf = appendString(buf, resp.ID)
	}
	buf = append(buf, `,"outputs":[`...)
	for i, o := range resp.Outputs {
		buf = comma(buf, i)
		buf = append(buf, `{"name":`...)
		buf = appendString(buf, o.Name)
		buf = append(buf, `,"datatype":"`...)
		buf = append(buf, o.Datatype...)
		buf = append(buf, `","shape":`...)
		buf = append(buf, '[')
		buf = appendInts(buf, o.Shape)
		if asBinary(o.Name) {
			if bin == nil {
				bin = make([]byte, 0, 4*length(o.Data))
			}
			n := len(bin)
			bin = appendBinary(bin, o.Data)
			buf = append(buf, `],"parameters":{"binary_data_size":`...)
			buf = strconv.AppendInt(buf, int64(len(bin)-n), 10)
			if o.Classes != nil {
				buf = append(buf, `,"classes":`...)
				buf = appendData(buf, o.Classes)
			}
			buf = append(buf, "}}"...)
			continue
		}
		buf = append(buf, `],"data":`...)
		buf = appendData(buf, o.Data)
		if o.Classes != nil {
			buf = append(buf, `,"parameters":{"classes":`...)
			buf = appendData(buf, o.Classes)
			buf = append(buf, '}')
		}
		buf = append(buf, '}')
	}
	buf = append(buf, "]}"...)
	h := w.Header()
	if bin != nil {
		h.Set("Content-Type", "application/octet-stream")
		h.Set(headerLengthKey, strconv.Itoa(len(buf)))
		buf = append(buf, bin...)
	} else {
		buf = append(buf, '\n')
		h.Set("Content-Type", "application/json")
	}
	h.Set("Content-Length", strconv.Itoa(len(buf)))
	w.WriteHeader(http.StatusOK)
	w.Write(buf)
	return http.StatusOK
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrModelNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrBadInput), errors.Is(err, ErrScalarTensor), errors.Is(err, ErrUnsupportedDatatype):
		return http.StatusBadRequest
	case errors.Is(err, ErrClosed), errors.Is(err, errStopped), errors.Is(err, ErrModelNotReady):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func writeJSON(w http.ResponseWriter, code int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
	return code
}

func writeError(w http.ResponseWriter, code int, err error) int {
	return writeJSON(w, code, map[string]string{"error": err.Error()})
}

// readBody reads r whole, into a buffer of the size the request declared
// when it declared one: growing by doubling would allocate about twice a
// large body's size on the way.
func readBody(r io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, size+1) // +1: EOF is seen without growing
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // longer than declared: grow
		}
	}
}

// largeRequest is the body size from which a request's memory is given
// back to the OS once it is answered (see returnMemory).
const largeRequest = 8 << 20

// returnMemory gives the memory a large request used back to the OS now,
// rather than over minutes: a 48 MB request parses into hundreds of MB,
// and an edge host shares its memory with what it serves. It runs at most
// once at a time; a request that finds it running leaves it to that one.
func (s *Server) returnMemory() {
	if s.freeing.CompareAndSwap(false, true) {
		go func() {
			defer s.freeing.Store(false)
			debug.FreeOSMemory()
		}()
	}
}
