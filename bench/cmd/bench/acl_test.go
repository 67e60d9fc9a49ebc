package main

import (
	"testing"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func TestACLBindingSet(t *testing.T) {
	bs := aclBindingSet(100)
	if len(bs) != 100 {
		t.Fatalf("got %d bindings, want 100", len(bs))
	}
	own, everyone := 0, 0
	for _, b := range bs {
		switch b.GetPrincipal() {
		case aclClient:
			own++
		case "User:*":
			everyone++
		}
		if b.GetPermission() != sharelogv1.AclPermission_ACL_PERMISSION_ALLOW {
			t.Fatalf("unexpected DENY %v", b)
		}
	}
	if own != 7 || everyone < 40 {
		t.Fatalf("client bindings %d (want 7), User:* bindings %d (want >= 40)", own, everyone)
	}
	if got := len(aclBindingSet(3)); got != 7 {
		t.Fatalf("the client's own bindings always come: got %d", got)
	}
}

func TestACLServerArgs(t *testing.T) {
	saved := benchACL
	t.Cleanup(func() { benchACL = saved })
	benchACL.bindings, benchACL.tokensFile = 0, ""
	if got := aclServerArgs([]string{"--fsync", "never"}); len(got) != 2 {
		t.Fatalf("without -acl-bindings the args are unchanged: %v", got)
	}
	benchACL.bindings, benchACL.tokensFile = 100, "/tmp/tokens"
	got := aclServerArgs([]string{"--fsync", "never"})
	want := []string{"--fsync", "never", "--auth-tokens-file", "/tmp/tokens", "--authorizer", "acl", "--super-users", "User:token-1"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if got := aclServerArgs([]string{"--kafka-addr", "127.0.0.1:0"}); len(got) != 2 {
		t.Fatalf("Kafka scenarios run without the authorizer: %v", got)
	}
}
