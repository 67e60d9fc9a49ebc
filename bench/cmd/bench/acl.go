package main

// -acl-bindings N: every sharelog server the harness starts runs with
// --authorizer acl and N bindings, and every client call goes through the
// binding check as an ordinary principal (not a super user), so that the
// cost of authorization on produce and share-fetch can be compared with a
// run without the flag.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The tokens file's lines: the first is the super user that loads the
// bindings (User:token-1), the second the principal every scenario runs as
// (User:token-2).
const (
	aclAdminToken  = "bench-admin-token"
	aclClientToken = "bench-client-token"
	aclClient      = "User:token-2"
)

// benchACL is the -acl-bindings setting, fixed before any server starts.
var benchACL struct {
	bindings   int
	tokensFile string
}

// setupACL writes the tokens file into work when -acl-bindings is set.
func setupACL(n int, work string) error {
	benchACL.bindings = n
	if n <= 0 {
		return nil
	}
	benchACL.tokensFile = filepath.Join(work, "bench-tokens")
	return os.WriteFile(benchACL.tokensFile, []byte(aclAdminToken+"\n"+aclClientToken+"\n"), 0o600)
}

// aclServerArgs adds the authorization flags to a server's arguments. The
// Kafka listener cannot run with --authorizer acl: its scenarios run
// without it.
func aclServerArgs(args []string) []string {
	if benchACL.bindings <= 0 || slices.Contains(args, "--kafka-addr") {
		return args
	}
	return append(slices.Clone(args), "--auth-tokens-file", benchACL.tokensFile, "--authorizer", "acl", "--super-users", "User:token-1")
}

// aclDialOptions make every call carry the client principal's token.
func aclDialOptions() []grpc.DialOption {
	if benchACL.bindings <= 0 {
		return nil
	}
	add := func(ctx context.Context) context.Context {
		// A call that already names its principal (loadACL, as the super
		// user) keeps it: the server refuses two authorization values.
		if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get("authorization")) > 0 {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+aclClientToken)
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(add(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(add(ctx), desc, cc, method, opts...)
		}),
	}
}

// aclBindingSet is n bindings: the client principal's own (what the
// scenarios need, on every topic and group) and fillers. Half the fillers
// are for every principal (User:*) with prefixed names, which every check
// of the client principal scans; the others name other principals.
func aclBindingSet(n int) []*sharelogv1.AclBinding {
	b := func(principal string, rt sharelogv1.ResourceType, pt sharelogv1.PatternType, name string, op sharelogv1.AclOperation) *sharelogv1.AclBinding {
		return &sharelogv1.AclBinding{Principal: principal, ResourceType: rt, PatternType: pt, ResourceName: name, Operation: op,
			Permission: sharelogv1.AclPermission_ACL_PERMISSION_ALLOW}
	}
	const (
		topic   = sharelogv1.ResourceType_RESOURCE_TYPE_TOPIC
		group   = sharelogv1.ResourceType_RESOURCE_TYPE_GROUP
		literal = sharelogv1.PatternType_PATTERN_TYPE_LITERAL
		prefix  = sharelogv1.PatternType_PATTERN_TYPE_PREFIXED
	)
	out := []*sharelogv1.AclBinding{
		b(aclClient, sharelogv1.ResourceType_RESOURCE_TYPE_CLUSTER, literal, "kafka-cluster", sharelogv1.AclOperation_ACL_OPERATION_CREATE),
		b(aclClient, topic, literal, "*", sharelogv1.AclOperation_ACL_OPERATION_WRITE),
		b(aclClient, topic, literal, "*", sharelogv1.AclOperation_ACL_OPERATION_READ),
		b(aclClient, topic, literal, "*", sharelogv1.AclOperation_ACL_OPERATION_DELETE),
		b(aclClient, group, literal, "*", sharelogv1.AclOperation_ACL_OPERATION_READ),
		b(aclClient, group, literal, "*", sharelogv1.AclOperation_ACL_OPERATION_DELETE),
		b(aclClient, group, literal, "*", sharelogv1.AclOperation_ACL_OPERATION_ALTER_CONFIGS),
	}
	for i := 0; len(out) < n; i++ {
		if i%2 == 0 {
			out = append(out, b("User:*", topic, prefix, fmt.Sprintf("other-%d.", i), sharelogv1.AclOperation_ACL_OPERATION_DESCRIBE))
		} else {
			out = append(out, b(fmt.Sprintf("User:filler-%d", i), topic, literal, fmt.Sprintf("filler-%d", i), sharelogv1.AclOperation_ACL_OPERATION_READ))
		}
	}
	return out
}

// loadACL creates the binding set on the server at addr, as the super user.
func loadACL(addr string) error {
	if benchACL.bindings <= 0 {
		return nil
	}
	c, err := dial(addr)
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+aclAdminToken))
	resp, err := sharelogv1.NewAclServiceClient(c.conn).CreateAcls(ctx, &sharelogv1.CreateAclsRequest{Bindings: aclBindingSet(benchACL.bindings)})
	if err != nil {
		return fmt.Errorf("load %d ACL bindings: %w", benchACL.bindings, err)
	}
	for i, r := range resp.GetResults() {
		if r.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
			return fmt.Errorf("ACL binding %d refused: %s", i, r.GetErrorMessage())
		}
	}
	return nil
}
