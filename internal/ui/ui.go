package ui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
)

//go:embed index.html assets
var files embed.FS

// assetsToken is replaced in index.html by the assets' address, which
// carries their digest.
const assetsToken = "{{assets}}"

// contentTypes are the types of the files the dashboard ships; others fall
// back to the system's table.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
	".png":  "image/png",
	".ico":  "image/x-icon",
	".txt":  "text/plain; charset=utf-8",
}

// contentSecurityPolicy keeps the page to its own origin: no inline
// script, no third party, no framing.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// file is one asset ready to serve.
type file struct {
	body  []byte
	gz    []byte // nil when compressing does not pay
	ctype string
	etag  string
}

// site is the dashboard's files, read once from the embedded tree.
type site struct {
	digest string
	index  file
	assets map[string]file // by path under assets/
}

var load = sync.OnceValue(func() *site {
	s, err := newSite(files)
	if err != nil {
		// The tree is embedded at build time: a failure is a bug in this
		// package, caught by its tests.
		panic("ui: " + err.Error())
	}
	return s
})

func newSite(fsys fs.FS) (*site, error) {
	s := &site{assets: map[string]file{}}
	var names []string
	err := fs.WalkDir(fsys, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	sum := sha256.New()
	for _, p := range names {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		sum.Write([]byte(p))
		sum.Write([]byte{0})
		sum.Write(b)
		s.assets[strings.TrimPrefix(p, "assets/")] = newFile(p, b)
	}
	s.digest = hex.EncodeToString(sum.Sum(nil))[:16]
	idx, err := fs.ReadFile(fsys, "index.html")
	if err != nil {
		return nil, err
	}
	s.index = newFile("index.html", bytes.ReplaceAll(idx, []byte(assetsToken), []byte("assets/"+s.digest)))
	return s, nil
}

func newFile(name string, b []byte) file {
	f := file{body: b, ctype: contentTypes[path.Ext(name)]}
	if f.ctype == "" {
		if f.ctype = mime.TypeByExtension(path.Ext(name)); f.ctype == "" {
			f.ctype = "application/octet-stream"
		}
	}
	sum := sha256.Sum256(b)
	f.etag = `"` + hex.EncodeToString(sum[:8]) + `"`
	if strings.HasPrefix(f.ctype, "text/") || strings.HasSuffix(f.ctype, "json") || strings.HasSuffix(f.ctype, "+xml") {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		if buf.Len() < len(b)*9/10 {
			f.gz = buf.Bytes()
		}
	}
	return f
}

// Handler serves the dashboard under /ui/: the page at /ui/ and its files
// under /ui/assets/DIGEST/. The page is revalidated on every load; the
// files, whose address changes with their content, are cached for a year.
// Only GET and HEAD are answered. Safe for concurrent use.
func Handler() http.Handler {
	s := load()
	return http.HandlerFunc(s.serveHTTP)
}

// Redirect answers /ui with a redirect to /ui/.
func Redirect() http.Handler {
	return http.RedirectHandler("/ui/", http.StatusMovedPermanently)
}

func (s *site) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p, ok := strings.CutPrefix(r.URL.Path, "/ui/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if p == "" || p == "index.html" {
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		s.serveFile(w, r, s.index)
		return
	}
	rest, ok := strings.CutPrefix(p, "assets/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	digest, name, ok := strings.Cut(rest, "/")
	f, found := s.assets[name]
	if !ok || !found {
		http.NotFound(w, r)
		return
	}
	if digest == s.digest {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		// A page loaded from an older binary: answer with today's file,
		// but let no cache keep it under the old address.
		h.Set("Cache-Control", "no-cache")
	}
	s.serveFile(w, r, f)
}

func (s *site) serveFile(w http.ResponseWriter, r *http.Request, f file) {
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	body, etag := f.body, f.etag
	if f.gz != nil {
		h.Add("Vary", "Accept-Encoding")
		if acceptsGzip(r) {
			body, etag = f.gz, strings.TrimSuffix(f.etag, `"`)+`-gz"`
			h.Set("Content-Encoding", "gzip")
		}
	}
	h.Set("ETag", etag)
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(params, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}
