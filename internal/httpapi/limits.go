package httpapi

import (
	"io"
	"net/http"
	"time"
)

// BodyIdleTimeout is how long a request body may send nothing before the
// connection is cut: a client that stalls mid-body (or drips bytes slower
// than this) does not hold a connection for long.
const BodyIdleTimeout = 30 * time.Second

// bodyDeadline gives every request body a read deadline that each
// successful read pushes BodyIdleTimeout further, so large uploads that
// keep moving are never cut, and stalled ones are.
func bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(BodyIdleTimeout)) == nil {
			r.Body = &idleBody{ReadCloser: r.Body, rc: rc}
		}
		next.ServeHTTP(w, r)
	})
}

type idleBody struct {
	io.ReadCloser
	rc *http.ResponseController
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		_ = b.rc.SetReadDeadline(time.Now().Add(BodyIdleTimeout))
	}
	return n, err
}
