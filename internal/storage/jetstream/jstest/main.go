package jstest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main is a test package's TestMain on one shared cluster: it starts the
// cluster with o, hands it to set, runs the tests, shuts the cluster down
// and then checks with goleak (and opts) that the tests left no goroutine
// behind: the cluster's own servers are gone by then. It exits the
// process.
func Main(m *testing.M, o Options, set func(*Cluster), opts ...goleak.Option) {
	goleak.VerifyTestMain(withCluster{m: m, o: o, set: set}, opts...)
}

type withCluster struct {
	m   *testing.M
	o   Options
	set func(*Cluster)
}

func (w withCluster) Run() int {
	c, err := Start(w.o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the JetStream test cluster:", err)
		return 1
	}
	defer c.Shutdown()
	w.set(c)
	return w.m.Run()
}
