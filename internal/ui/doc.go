// Package ui is the agent's web dashboard: plain ES modules, CSS and inline
// SVG, embedded in the binary and served under /ui/ on the agent's API
// address. The pages call the API on the same origin (/v1/...) and follow
// /v1/events; nothing is fetched from elsewhere and there is no build step.
//
//	mux.Handle("/ui/", ui.Handler())
//	mux.Handle("GET /ui", ui.Redirect())
//
// Assets are addressed by a digest of their content (/ui/assets/DIGEST/...),
// so a browser caches them for good and a new binary is picked up at the
// next load of /ui/, which is revalidated every time.
package ui
