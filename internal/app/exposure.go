package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// insecureWarnInterval is how often a server allowed to listen remotely
// without TLS and authentication says so again.
const insecureWarnInterval = time.Hour

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

// exposedListeners returns the flags (with their values) of the listeners
// bound beyond loopback without both TLS and authentication: anyone who
// can reach them could read, write and purge every topic in clear text.
func exposedListeners(ctx context.Context, cfg Config, grpcOverridden bool) ([]string, error) {
	// Client certificates (--tls-client-ca) authenticate as tokens do.
	if cfg.TLSCert != "" && (cfg.AuthTokensFile != "" || cfg.TLSClientCA != "") {
		return nil, nil
	}
	var exposed []string
	for _, l := range []struct {
		flag, addr string
		skip       bool
	}{{"--grpc-addr", cfg.GRPCAddr, grpcOverridden}, {"--http-addr", cfg.HTTPAddr, false}, {"--kafka-addr", cfg.KafkaAddr, cfg.KafkaAddr == ""}} {
		if l.skip {
			continue
		}
		ok, err := isLoopback(ctx, l.addr)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", l.flag, l.addr, err)
		}
		if !ok {
			exposed = append(exposed, l.flag+" "+l.addr)
		}
	}
	return exposed, nil
}

func exposureError(exposed []string) error {
	return fmt.Errorf("%v: not a loopback address, and the server has not both TLS (--tls-cert/--tls-key) and authentication (--auth-tokens-file or --tls-client-ca); "+
		"refusing to serve it in the clear to anyone who can reach it. Bind 127.0.0.1, configure TLS and tokens, "+
		"or pass --insecure-allow-remote to accept the risk", exposed)
}

func warnExposed(log *slog.Logger, exposed []string) {
	log.Warn("serving beyond loopback without TLS and authentication (--insecure-allow-remote): anyone who can reach these listeners can read, write and purge every topic",
		"listeners", exposed)
}

// exposureLoop repeats the warning every interval until stop closes.
func exposureLoop(log *slog.Logger, exposed []string, interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			warnExposed(log, exposed)
		}
	}
}
