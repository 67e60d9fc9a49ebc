// Package console is sharelog's web console, served under /ui/ by the HTTP
// listener (docs/console.md).
//
// The console is static files embedded in the binary (assets/: plain ES
// modules and CSS, no build step, and a vendored uPlot for the charts, see
// assets/vendor/README.md). Its pages call only the public REST API under
// /v1 from the browser, with the same bearer token as any client, so every
// rule of the API (authentication, limits, validation) applies to them as to
// any other caller; the files themselves hold no data and are served
// without a token, like /openapi.json.
package console
