package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// runNATSChild runs a NATS server from a configuration file until it is
// killed: the test binary doubles as nats-server (built from the pinned
// module), so a fault test can SIGKILL a real NATS process.
func runNATSChild(conf string) {
	opts, err := natsserver.ProcessConfigFile(conf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats config:", err)
		os.Exit(2)
	}
	opts.NoSigs = true
	s, err := natsserver.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats server:", err)
		os.Exit(2)
	}
	s.ConfigureLogger()
	s.Start()
	s.WaitForShutdown()
	os.Exit(0)
}

// natsNodeConf is one node's configuration: the durable mode sharelog
// requires (fsync before every acknowledgement), routes to every node, no
// advertised addresses (clients use the URLs they were given).
const natsNodeConf = `server_name: %s
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: sharelog-fault
  listen: 127.0.0.1:%d
  no_advertise: true
  routes: [%s]
}
`

// natsProcs is a 3-node NATS cluster of child processes.
type natsProcs struct {
	names []string
	urls  []string
	cmds  []*exec.Cmd
	exit  []chan struct{}
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func startNATSProcs(t *testing.T) *natsProcs {
	t.Helper()
	dir := t.TempDir()
	np := &natsProcs{}
	var client, route []int
	for range 3 {
		client, route = append(client, freePort(t)), append(route, freePort(t))
	}
	var routes []string
	for _, p := range route {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		conf := filepath.Join(dir, name+".conf")
		require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, natsNodeConf, name, client[i], filepath.Join(dir, name), route[i],
			strings.Join(routes, ", ")), 0o600))
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "SHARELOG_TEST_NATS_CONF="+conf)
		require.NoError(t, cmd.Start())
		ex := make(chan struct{})
		go func() { _ = cmd.Wait(); close(ex) }()
		np.names, np.cmds, np.exit = append(np.names, name), append(np.cmds, cmd), append(np.exit, ex)
		np.urls = append(np.urls, fmt.Sprintf("nats://127.0.0.1:%d", client[i]))
	}
	t.Cleanup(func() {
		for i, c := range np.cmds {
			_ = c.Process.Kill()
			<-np.exit[i]
		}
	})
	// Ready: JetStream answers an account-info request through node 1.
	nc, err := nats.Connect(np.url(), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := njs.New(nc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the NATS cluster did not become ready")
	return np
}

func (np *natsProcs) url() string { return strings.Join(np.urls, ",") }

// kill SIGKILLs the node named name.
func (np *natsProcs) kill(t *testing.T, name string) {
	t.Helper()
	for i, n := range np.names {
		if n == name {
			require.NoError(t, np.cmds[i].Process.Signal(syscall.SIGKILL))
			<-np.exit[i]
			return
		}
	}
	t.Fatalf("no NATS node %s", name)
}
