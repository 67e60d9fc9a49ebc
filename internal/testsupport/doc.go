// Package testsupport is what the tests of every package in the module
// share to drive the real server: an in-process stack, a test CA,
// readiness and metrics waits, and ShareFetch response helpers. It is an
// ordinary (non-_test) package so that tests anywhere can import it, and
// only tests may: the architecture test keeps it out of the binaries.
//
// # The stack
//
// [NewStack] is the real server in-process: gRPC over bufconn, the REST
// gateway over httptest (the gateway itself dials the gRPC server, as in
// production — an in-process gateway could not stream), a file store in
// t.TempDir(). [Config] is the configuration every test starts from
// (loopback :0 listeners, fsync never), and [Start] runs the server on
// real loopback listeners for tests that need an address (a CLI, a client
// library dialling by address, a restart on the same port).
//
// Both close what they start at t's cleanup, so a test never leaks the
// server's goroutines: the packages that use them run goleak in TestMain.
// [ClusterConfig] and [ClusterOptions] configure one instance of a
// cluster on a JetStream test cluster (jstest), with a short lease and a
// quick readiness loop; [Dial] and [FastReconnect] are the clients' side.
//
// # Certificates
//
// [NewCA] makes a throwaway CA; [CA.Issue] signs server or client leaf
// certificates (returned as a tls.Certificate and as PEM), and
// [CA.IssueFiles] writes them for flags that take file names.
//
// # Waits
//
// [WaitReadyz] polls /readyz until it answers 200 with a given line;
// [AwaitLongPolls] waits until n calls hold a long-poll slot (the
// sharelog_long_polls_waiting gauge), so a test produces only once its
// fetches wait.
//
// # Import cycles
//
// testsupport imports internal/app, which imports the domain and storage
// packages: their in-package tests cannot import it (that would be a
// cycle), and keep their own fixtures over their own types.
package testsupport
