package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Files is the console's files, index.html at the root.
var Files = mustSub(assets, "assets")

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// contentSecurityPolicy lets the pages load their own files and call their
// own origin only: no inline script, no third-party origin, no framing.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the console under prefix (e.g. "/ui/"), which it strips.
// Only GET and HEAD reach files; the caller routes the prefix to it.
func Handler(prefix string) http.Handler {
	files := http.StripPrefix(prefix, http.FileServerFS(Files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the binary: revalidate rather than cache.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
