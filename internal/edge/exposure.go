package edge

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// InsecureWarnInterval is how often a server allowed to listen remotely
// without TLS and authentication says so again (ExposureLoop).
const InsecureWarnInterval = time.Hour

// isLoopback reports whether a listen address binds loopback only. An
// empty or unspecified host (":8080", "0.0.0.0", "::") binds every
// interface; a name counts as loopback only if all its addresses are.
func isLoopback(ctx context.Context, addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "" {
		return false, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return false, err
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false, nil
		}
	}
	return len(ips) > 0, nil
}

// Listen is one listener to check for exposure: its flag, as the
// refusal names it, and its listen address.
type Listen struct{ Flag, Addr string }

// Exposed returns the listeners (flag and address) bound beyond loopback
// when the server has not both TLS and authentication (secured): anyone
// who can reach them could read, write and purge every topic in clear
// text. With secured it returns none.
func Exposed(ctx context.Context, secured bool, listeners ...Listen) ([]string, error) {
	if secured {
		return nil, nil
	}
	var exposed []string
	for _, l := range listeners {
		ok, err := isLoopback(ctx, l.Addr)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", l.Flag, l.Addr, err)
		}
		if !ok {
			exposed = append(exposed, l.Flag+" "+l.Addr)
		}
	}
	return exposed, nil
}

// ExposureError is the refusal to serve the exposed listeners.
func ExposureError(exposed []string) error {
	return fmt.Errorf("%v: not a loopback address, and the server has not both TLS (--tls-cert/--tls-key) and authentication (--auth-tokens-file or --tls-client-ca); "+
		"refusing to serve it in the clear to anyone who can reach it. Bind 127.0.0.1, configure TLS and tokens, "+
		"or pass --insecure-allow-remote to accept the risk", exposed)
}

// WarnExposed says that the exposed listeners are served anyway
// (--insecure-allow-remote).
func WarnExposed(log *slog.Logger, exposed []string) {
	log.Warn("serving beyond loopback without TLS and authentication (--insecure-allow-remote): anyone who can reach these listeners can read, write and purge every topic",
		"listeners", exposed)
}

// ExposureLoop repeats WarnExposed every interval until stop closes.
func ExposureLoop(log *slog.Logger, exposed []string, interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			WarnExposed(log, exposed)
		}
	}
}
