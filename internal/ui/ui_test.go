package ui_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/strata-mesh/strata/internal/ui"
)

func serve(t *testing.T, method, path string, hdr map[string]string) *http.Response {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui.Handler())
	mux.Handle("GET /ui", ui.Redirect())
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	var r io.Reader = res.Body
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// assetsOf returns the assets' address the page names (assets/DIGEST).
func assetsOf(t *testing.T) string {
	t.Helper()
	page := body(t, serve(t, "GET", "/ui/", nil))
	m := regexp.MustCompile(`src="(assets/[0-9a-f]{16})/app\.js"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the page names no assets/DIGEST/app.js:\n%s", page)
	}
	return m[1]
}

func TestIndex(t *testing.T) {
	res := serve(t, "GET", "/ui/", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/: %d", res.StatusCode)
	}
	for k, want := range map[string]string{
		"Content-Type":           "text/html; charset=utf-8",
		"Cache-Control":          "no-cache",
		"X-Content-Type-Options": "nosniff",
	} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy = %q, want the page kept to its origin", csp)
	}
	page := body(t, res)
	if strings.Contains(page, "{{") {
		t.Errorf("the page has an unreplaced placeholder:\n%s", page)
	}
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Errorf("the page names another origin:\n%s", page)
	}
}

func TestRedirect(t *testing.T) {
	res := serve(t, "GET", "/ui", nil)
	if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /ui: %d to %q, want 301 to /ui/", res.StatusCode, res.Header.Get("Location"))
	}
}

func TestAssets(t *testing.T) {
	base := "/ui/" + assetsOf(t)
	for _, tc := range []struct{ path, ctype string }{
		{"/app.js", "text/javascript; charset=utf-8"},
		{"/lib.js", "text/javascript; charset=utf-8"},
		{"/pages/mesh.js", "text/javascript; charset=utf-8"},
		{"/app.css", "text/css; charset=utf-8"},
		{"/icon.svg", "image/svg+xml"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res := serve(t, "GET", base+tc.path, nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d", base+tc.path, res.StatusCode)
			}
			if got := res.Header.Get("Content-Type"); got != tc.ctype {
				t.Errorf("Content-Type = %q, want %q", got, tc.ctype)
			}
			if got := res.Header.Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
				t.Errorf("Cache-Control = %q, want immutable: the address carries the digest", got)
			}
			etag := res.Header.Get("ETag")
			if etag == "" {
				t.Fatal("no ETag")
			}
			again := serve(t, "GET", base+tc.path, map[string]string{"If-None-Match": etag})
			if again.StatusCode != http.StatusNotModified {
				t.Errorf("If-None-Match %s: %d, want 304", etag, again.StatusCode)
			}
		})
	}
}

func TestGzip(t *testing.T) {
	path := "/ui/" + assetsOf(t) + "/lib.js"
	plain := serve(t, "GET", path, nil)
	zipped := serve(t, "GET", path, map[string]string{"Accept-Encoding": "gzip, br"})
	if zipped.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Accept-Encoding gzip: Content-Encoding = %q", zipped.Header.Get("Content-Encoding"))
	}
	if plain.Header.Get("ETag") == zipped.Header.Get("ETag") {
		t.Errorf("the plain and gzip answers share ETag %s", plain.Header.Get("ETag"))
	}
	if !strings.Contains(zipped.Header.Get("Vary"), "Accept-Encoding") {
		t.Errorf("Vary = %q, want Accept-Encoding", zipped.Header.Get("Vary"))
	}
	if a, b := body(t, plain), body(t, zipped); a != b {
		t.Errorf("the gzip answer decodes to %d bytes, the plain one has %d", len(b), len(a))
	}
}

func TestOldDigest(t *testing.T) {
	res := serve(t, "GET", "/ui/assets/0000000000000000/app.js", nil)
	if res.StatusCode != http.StatusOK || res.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("an old digest: %d, Cache-Control %q; want today's file, not cached", res.StatusCode, res.Header.Get("Cache-Control"))
	}
}

func TestNotFound(t *testing.T) {
	for _, p := range []string{"/ui/nope", "/ui/assets/", "/ui/assets/x/nope.js", "/ui/assets/x/pages", "/ui/index.htm"} {
		if res := serve(t, "GET", p, nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, res.StatusCode)
		}
	}
	res := serve(t, "POST", "/ui/", nil)
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d, want 405", res.StatusCode)
	}
	head := serve(t, "HEAD", "/ui/", nil)
	if head.StatusCode != http.StatusOK || body(t, head) != "" {
		t.Errorf("HEAD /ui/: %d with a body", head.StatusCode)
	}
}

// TestSmall keeps the dashboard small: every file gzipped together stays
// well under the 500 KB a first load may cost.
func TestSmall(t *testing.T) {
	base := "/ui/" + assetsOf(t)
	total := 0
	for _, p := range []string{"", "/app.js", "/lib.js", "/rtt.js", "/app.css", "/icon.svg", "/pages/mesh.js", "/pages/placements.js",
		"/pages/models.js", "/pages/drift.js", "/pages/training.js", "/pages/events.js"} {
		path := base + p
		if p == "" {
			path = "/ui/"
		}
		res := serve(t, "GET", path, map[string]string{"Accept-Encoding": "gzip"})
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, res.StatusCode)
		}
		var buf bytes.Buffer
		n, _ := io.Copy(&buf, res.Body)
		total += int(n)
	}
	t.Logf("every file, gzipped: %d bytes", total)
	if total > 150<<10 {
		t.Errorf("the dashboard's files are %d bytes gzipped; keep them under 150 KiB", total)
	}
}
