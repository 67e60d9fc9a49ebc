package authz_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/authz"
)

var ctx = context.Background()

func bind(p string, rt authz.ResourceType, pt authz.PatternType, name string, op authz.Operation, perm authz.Permission) authz.Binding {
	return authz.Binding{Principal: p, ResourceType: rt, PatternType: pt, ResourceName: name, Operation: op, Permission: perm}
}

func newACL(t testing.TB, bs []authz.Binding, super ...string) *authz.ACL {
	t.Helper()
	a, err := authz.NewACL(ctx, &authz.MemStore{}, super)
	require.NoError(t, err)
	errs, err := a.Create(ctx, bs)
	require.NoError(t, err)
	for _, e := range errs {
		require.NoError(t, e)
	}
	return a
}

func topic(n string) authz.Resource { return authz.Resource{Type: authz.Topic, Name: n} }
func group(n string) authz.Resource { return authz.Resource{Type: authz.Group, Name: n} }

func TestAuthorize(t *testing.T) {
	const alice, bob = "User:alice", "User:bob"
	L, P := authz.Literal, authz.Prefixed
	A, D := authz.Allow, authz.Deny
	cases := []struct {
		name     string
		bindings []authz.Binding
		super    []string
		who      string
		op       authz.Operation
		res      authz.Resource
		want     authz.Decision
	}{
		{"no binding denies", nil, nil, alice, authz.Read, topic("t"), authz.Denied},
		{"literal allow", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Read, A)}, nil, alice, authz.Read, topic("t"), authz.Allowed},
		{"literal is not a prefix", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Read, A)}, nil, alice, authz.Read, topic("tt"), authz.Denied},
		{"other principal's allow", []authz.Binding{bind(bob, authz.Topic, L, "t", authz.Read, A)}, nil, alice, authz.Read, topic("t"), authz.Denied},
		{"other operation", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Write, A)}, nil, alice, authz.Read, topic("t"), authz.Denied},
		{"other resource type", []authz.Binding{bind(alice, authz.Group, L, "t", authz.Read, A)}, nil, alice, authz.Read, topic("t"), authz.Denied},
		{"wildcard name", []authz.Binding{bind(alice, authz.Topic, L, "*", authz.Read, A)}, nil, alice, authz.Read, topic("any"), authz.Allowed},
		{"wildcard principal", []authz.Binding{bind("User:*", authz.Topic, L, "t", authz.Read, A)}, nil, alice, authz.Read, topic("t"), authz.Allowed},
		{"prefixed", []authz.Binding{bind(alice, authz.Topic, P, "orders.", authz.Write, A)}, nil, alice, authz.Write, topic("orders.eu"), authz.Allowed},
		{"prefixed other", []authz.Binding{bind(alice, authz.Topic, P, "orders.", authz.Write, A)}, nil, alice, authz.Write, topic("order"), authz.Denied},
		{"deny beats allow", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Read, A), bind(alice, authz.Topic, L, "t", authz.Read, D)}, nil, alice, authz.Read, topic("t"), authz.Denied},
		{"prefixed deny beats literal allow", []authz.Binding{bind(alice, authz.Topic, L, "t.x", authz.Read, A), bind(alice, authz.Topic, P, "t.", authz.Read, D)}, nil, alice, authz.Read, topic("t.x"), authz.Denied},
		{"wildcard-principal deny beats allow", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.All, A), bind("User:*", authz.Topic, L, "*", authz.Write, D)}, nil, alice, authz.Write, topic("t"), authz.Denied},
		{"deny of another operation", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Read, A), bind(alice, authz.Topic, L, "t", authz.Write, D)}, nil, alice, authz.Read, topic("t"), authz.Allowed},
		{"read implies describe", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Read, A)}, nil, alice, authz.Describe, topic("t"), authz.Allowed},
		{"write implies describe", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Write, A)}, nil, alice, authz.Describe, topic("t"), authz.Allowed},
		{"delete implies describe", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Delete, A)}, nil, alice, authz.Describe, topic("t"), authz.Allowed},
		{"alter implies describe", []authz.Binding{bind(alice, authz.Group, L, "g", authz.Alter, A)}, nil, alice, authz.Describe, group("g"), authz.Allowed},
		{"create does not imply describe", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Create, A)}, nil, alice, authz.Describe, topic("t"), authz.Denied},
		{"describe does not imply read", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Describe, A)}, nil, alice, authz.Read, topic("t"), authz.Denied},
		{"alter_configs implies describe_configs", []authz.Binding{bind(alice, authz.Group, L, "g", authz.AlterConfigs, A)}, nil, alice, authz.DescribeConfigs, group("g"), authz.Allowed},
		{"describe_configs does not imply alter_configs", []authz.Binding{bind(alice, authz.Group, L, "g", authz.DescribeConfigs, A)}, nil, alice, authz.AlterConfigs, group("g"), authz.Denied},
		{"deny read does not deny describe", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Describe, A), bind(alice, authz.Topic, L, "t", authz.Read, D)}, nil, alice, authz.Describe, topic("t"), authz.Allowed},
		{"all allows everything", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.All, A)}, nil, alice, authz.DescribeConfigs, topic("t"), authz.Allowed},
		{"deny all denies everything", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.All, A), bind(alice, authz.Topic, L, "t", authz.All, D)}, nil, alice, authz.Describe, topic("t"), authz.Denied},
		{"super user", nil, []string{alice}, alice, authz.Delete, topic("t"), authz.Allowed},
		{"super user beats deny", []authz.Binding{bind(alice, authz.Topic, L, "*", authz.All, D)}, []string{alice}, alice, authz.Delete, topic("t"), authz.Allowed},
		{"super user is per principal", nil, []string{alice}, bob, authz.Read, topic("t"), authz.Denied},
		{"cluster", []authz.Binding{bind(alice, authz.Cluster, L, authz.ClusterName, authz.Create, A)}, nil, alice, authz.Create, authz.Resource{Type: authz.Cluster, Name: authz.ClusterName}, authz.Allowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newACL(t, tc.bindings, tc.super...)
			assert.Equal(t, tc.want, a.Authorize(ctx, tc.who, tc.op, tc.res))
		})
	}
}

// reference is the obvious evaluator the index must agree with.
func reference(bs []authz.Binding, who string, op authz.Operation, res authz.Resource) authz.Decision {
	covers := func(b authz.Binding) bool {
		if b.ResourceType != res.Type || b.Principal != who && b.Principal != "User:*" {
			return false
		}
		if b.PatternType == authz.Literal {
			return b.ResourceName == res.Name || b.ResourceName == "*"
		}
		return strings.HasPrefix(res.Name, b.ResourceName)
	}
	allowed := false
	for _, b := range bs {
		if !covers(b) {
			continue
		}
		if b.Permission == authz.Deny && (b.Operation == op || b.Operation == authz.All) {
			return authz.Denied
		}
		if b.Permission == authz.Allow {
			switch {
			case b.Operation == op, b.Operation == authz.All:
				allowed = true
			case op == authz.Describe && (b.Operation == authz.Read || b.Operation == authz.Write || b.Operation == authz.Delete || b.Operation == authz.Alter):
				allowed = true
			case op == authz.DescribeConfigs && b.Operation == authz.AlterConfigs:
				allowed = true
			}
		}
	}
	return authz.Decision(allowed)
}

func TestAuthorizeAgreesWithReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	principals := []string{"User:a", "User:b", "User:*"}
	names := []string{"t", "t.1", "t.2", "u", "*", "t."}
	for round := range 300 {
		var bs []authz.Binding
		for range rng.IntN(12) {
			pt := authz.Literal
			if rng.IntN(3) == 0 {
				pt = authz.Prefixed
			}
			name := names[rng.IntN(len(names))]
			if pt == authz.Prefixed && name == "*" {
				name = "t"
			}
			perm := authz.Allow
			if rng.IntN(4) == 0 {
				perm = authz.Deny
			}
			bs = append(bs, bind(principals[rng.IntN(3)], authz.ResourceType(1+rng.IntN(2)), pt, name, authz.Operation(1+rng.IntN(9)), perm))
		}
		a := newACL(t, bs)
		for _, who := range []string{"User:a", "User:b"} {
			for _, n := range []string{"t", "t.1", "t.22", "u", "v"} {
				for op := authz.All; op <= authz.DescribeConfigs; op++ {
					for _, rt := range []authz.ResourceType{authz.Topic, authz.Group} {
						res := authz.Resource{Type: rt, Name: n}
						require.Equal(t, reference(bs, who, op, res), a.Authorize(ctx, who, op, res),
							"round %d: %s %s %s with %v", round, who, op, res, bs)
					}
				}
			}
		}
	}
}

func TestAuthorizeDoesNotAllocate(t *testing.T) {
	var bs []authz.Binding
	for i := range 100 {
		bs = append(bs, bind("User:other"+string(rune('a'+i%26)), authz.Topic, authz.Prefixed, "p"+string(rune('a'+i%26)), authz.Write, authz.Allow))
	}
	bs = append(bs, bind("User:bench", authz.Topic, authz.Literal, "bench", authz.Write, authz.Allow),
		bind("User:bench", authz.Topic, authz.Prefixed, "be", authz.Read, authz.Allow))
	a := newACL(t, bs)
	allocs := testing.AllocsPerRun(1000, func() {
		if !a.Authorize(ctx, "User:bench", authz.Write, authz.Resource{Type: authz.Topic, Name: "bench"}) {
			t.Fatal("denied")
		}
	})
	assert.Zero(t, allocs)
}

func TestBindingValidate(t *testing.T) {
	ok := bind("User:a", authz.Topic, authz.Literal, "t", authz.Read, authz.Allow)
	require.NoError(t, ok.Validate())
	bad := map[string]func(b *authz.Binding){
		"no principal":        func(b *authz.Binding) { b.Principal = "" },
		"principal no prefix": func(b *authz.Binding) { b.Principal = "alice" },
		"empty user":          func(b *authz.Binding) { b.Principal = "User:" },
		"any resource":        func(b *authz.Binding) { b.ResourceType = authz.AnyResource },
		"match pattern":       func(b *authz.Binding) { b.PatternType = authz.Match },
		"any pattern":         func(b *authz.Binding) { b.PatternType = authz.AnyPattern },
		"empty name":          func(b *authz.Binding) { b.ResourceName = "" },
		"any operation":       func(b *authz.Binding) { b.Operation = authz.AnyOperation },
		"any permission":      func(b *authz.Binding) { b.Permission = authz.AnyPermission },
		"cluster other name":  func(b *authz.Binding) { b.ResourceType = authz.Cluster },
		"prefixed star":       func(b *authz.Binding) { b.PatternType, b.ResourceName = authz.Prefixed, "*" },
	}
	for name, mut := range bad {
		b := ok
		mut(&b)
		assert.Error(t, b.Validate(), name)
	}
}

func TestFilterMatches(t *testing.T) {
	lit := bind("User:a", authz.Topic, authz.Literal, "orders", authz.Read, authz.Allow)
	star := bind("User:a", authz.Topic, authz.Literal, "*", authz.Read, authz.Allow)
	pre := bind("User:b", authz.Topic, authz.Prefixed, "ord", authz.Write, authz.Deny)
	other := bind("User:a", authz.Group, authz.Literal, "orders", authz.Read, authz.Allow)
	all := []authz.Binding{lit, star, pre, other}
	cases := []struct {
		name string
		f    authz.Filter
		want []authz.Binding
	}{
		{"any", authz.Filter{}, all},
		{"principal", authz.Filter{Principal: "User:b"}, []authz.Binding{pre}},
		{"type", authz.Filter{ResourceType: authz.Group}, []authz.Binding{other}},
		{"literal name", authz.Filter{ResourceType: authz.Topic, PatternType: authz.Literal, ResourceName: "orders"}, []authz.Binding{lit}},
		{"any pattern, exact name", authz.Filter{ResourceName: "ord"}, []authz.Binding{pre}},
		{"prefixed", authz.Filter{PatternType: authz.Prefixed}, []authz.Binding{pre}},
		{"match", authz.Filter{ResourceType: authz.Topic, PatternType: authz.Match, ResourceName: "orders"}, []authz.Binding{lit, star, pre}},
		{"match other name", authz.Filter{ResourceType: authz.Topic, PatternType: authz.Match, ResourceName: "x"}, []authz.Binding{star}},
		{"operation and permission", authz.Filter{Operation: authz.Write, Permission: authz.Deny}, []authz.Binding{pre}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []authz.Binding
			for _, b := range all {
				if tc.f.Matches(b) {
					got = append(got, b)
				}
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestCreateDescribeDelete(t *testing.T) {
	store := &authz.MemStore{}
	a, err := authz.NewACL(ctx, store, nil)
	require.NoError(t, err)
	good := bind("User:a", authz.Topic, authz.Literal, "t", authz.Read, authz.Allow)
	errs, err := a.Create(ctx, []authz.Binding{good, {Principal: "nobody"}, good})
	require.NoError(t, err)
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], authz.ErrInvalid)
	assert.NoError(t, errs[2], "a duplicate is no error")
	assert.Equal(t, []authz.Binding{good}, a.Bindings())
	saved, _ := store.Load(ctx)
	assert.Equal(t, []authz.Binding{good}, saved)

	// A failed save changes nothing.
	store.SaveErr = errors.New("disk full")
	extra := bind("User:b", authz.Group, authz.Literal, "g", authz.Read, authz.Allow)
	_, err = a.Create(ctx, []authz.Binding{extra})
	require.Error(t, err)
	assert.Equal(t, []authz.Binding{good}, a.Bindings())
	assert.Equal(t, authz.Denied, a.Authorize(ctx, "User:b", authz.Read, group("g")))
	_, err = a.Delete(ctx, []authz.Filter{{}})
	require.Error(t, err)
	assert.Equal(t, authz.Allowed, a.Authorize(ctx, "User:a", authz.Read, topic("t")))
	store.SaveErr = nil

	_, err = a.Create(ctx, []authz.Binding{extra})
	require.NoError(t, err)
	got, err := a.Describe(authz.Filter{ResourceType: authz.Group})
	require.NoError(t, err)
	assert.Equal(t, []authz.Binding{extra}, got)
	_, err = a.Describe(authz.Filter{Principal: "bad"})
	assert.ErrorIs(t, err, authz.ErrInvalid)

	res, err := a.Delete(ctx, []authz.Filter{{Principal: "User:a"}, {Principal: "bad"}, {Principal: "User:zzz"}})
	require.NoError(t, err)
	assert.Equal(t, []authz.Binding{good}, res[0].Matched)
	assert.ErrorIs(t, res[1].Err, authz.ErrInvalid)
	assert.Empty(t, res[2].Matched)
	assert.Equal(t, []authz.Binding{extra}, a.Bindings())
	assert.Equal(t, authz.Denied, a.Authorize(ctx, "User:a", authz.Read, topic("t")), "a deleted binding no longer allows")
}

func TestFileStore(t *testing.T) {
	dir := t.TempDir()
	s, err := authz.NewFileStore(dir)
	require.NoError(t, err)
	got, err := s.Load(ctx)
	require.NoError(t, err)
	assert.Empty(t, got, "no file is no bindings")

	bs := []authz.Binding{
		bind("User:a", authz.Topic, authz.Prefixed, "orders.", authz.Write, authz.Allow),
		bind("User:*", authz.Cluster, authz.Literal, authz.ClusterName, authz.Describe, authz.Deny),
		bind("User:b", authz.Group, authz.Literal, "*", authz.DescribeConfigs, authz.Allow),
	}
	require.NoError(t, s.Save(ctx, bs))
	_, err = os.Stat(filepath.Join(dir, authz.FileName+".tmp"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	s2, err := authz.NewFileStore(dir)
	require.NoError(t, err)
	got, err = s2.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, bs, got)

	// A leftover temporary file is removed; the saved file wins.
	require.NoError(t, os.WriteFile(filepath.Join(dir, authz.FileName+".tmp"), []byte("{half"), 0o644))
	s3, err := authz.NewFileStore(dir)
	require.NoError(t, err)
	got, err = s3.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, bs, got)
	_, err = os.Stat(filepath.Join(dir, authz.FileName+".tmp"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestFileStoreDamaged(t *testing.T) {
	for name, content := range map[string]string{
		"truncated":      `{"format":1,"bindings":[{"principal":"User:a"`,
		"empty":          ``,
		"unknown field":  `{"format":1,"bindings":[],"extra":1}`,
		"bad format":     `{"format":7,"bindings":[]}`,
		"bad operation":  `{"format":1,"bindings":[{"principal":"User:a","resourceType":"TOPIC","patternType":"LITERAL","resourceName":"t","operation":"FLY","permission":"ALLOW"}]}`,
		"invalid":        `{"format":1,"bindings":[{"principal":"alice","resourceType":"TOPIC","patternType":"LITERAL","resourceName":"t","operation":"READ","permission":"ALLOW"}]}`,
		"trailing bytes": `{"format":1,"bindings":[]} x`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, authz.FileName)
			require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
			s, err := authz.NewFileStore(dir)
			require.NoError(t, err)
			_, err = authz.NewACL(ctx, s, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path, "the error names the file")
		})
	}
}

func TestParseOperation(t *testing.T) {
	for in, want := range map[string]authz.Operation{"Read": authz.Read, "DESCRIBE_CONFIGS": authz.DescribeConfigs,
		"DescribeConfigs": authz.DescribeConfigs, "alter-configs": authz.AlterConfigs, "All": authz.All} {
		got, err := authz.ParseOperation(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := authz.ParseOperation("Fly")
	assert.Error(t, err)
	_, err = authz.ParseOperation("Any")
	assert.Error(t, err)
}

func TestSuperUsersValidated(t *testing.T) {
	_, err := authz.NewACL(ctx, &authz.MemStore{}, []string{"alice"})
	assert.Error(t, err)
	_, err = authz.NewACL(ctx, &authz.MemStore{}, []string{"User:*"})
	assert.Error(t, err)
}

// FuzzFileStoreLoad: whatever the file holds, Load returns valid bindings
// that survive a save and a load unchanged, or an error naming the file.
func FuzzFileStoreLoad(f *testing.F) {
	f.Add([]byte(`{"format":1,"bindings":[{"principal":"User:a","resourceType":"TOPIC","patternType":"PREFIXED","resourceName":"o.","operation":"WRITE","permission":"ALLOW"}]}`))
	f.Add([]byte(`{"format":1,"bindings":[]}`))
	f.Add([]byte(`{"format":1,"bindings":[{"principal":"User:*","resourceType":"CLUSTER","patternType":"LITERAL","resourceName":"kafka-cluster","operation":"ALL","permission":"DENY"}]}`))
	f.Add([]byte(`{"format":1`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, authz.FileName)
		require.NoError(t, os.WriteFile(path, raw, 0o644))
		s, err := authz.NewFileStore(dir)
		require.NoError(t, err)
		bs, err := s.Load(ctx)
		if err != nil {
			require.Contains(t, err.Error(), path)
			return
		}
		for _, b := range bs {
			require.NoError(t, b.Validate())
		}
		require.NoError(t, s.Save(ctx, bs))
		again, err := s.Load(ctx)
		require.NoError(t, err)
		if len(bs) == 0 {
			require.Empty(t, again)
		} else {
			require.Equal(t, bs, again)
		}
	})
}

func TestFilterAllowed(t *testing.T) {
	a := newACL(t, []authz.Binding{bind("User:a", authz.Topic, authz.Prefixed, "x.", authz.Describe, authz.Allow)})
	names := []string{"x.1", "y", "x.2", "x"}
	assert.Equal(t, []string{"x.1", "x.2"}, authz.FilterAllowed(ctx, a, "User:a", authz.Describe, authz.Topic, names))
	assert.Equal(t, []string{"x.1", "y", "x.2", "x"}, names, "the input is not modified")
	assert.Equal(t, names, authz.FilterAllowed(ctx, authz.AllowAll{}, "User:a", authz.Describe, authz.Topic, names))
}

// BenchmarkAuthorize100Bindings is the cost of one check among 100
// bindings, half of them prefixed User:* bindings every check scans (the
// set the bench harness's -acl-bindings 100 loads): the per-call cost
// authorization adds to a Produce or a ShareFetch of one topic.
func BenchmarkAuthorize100Bindings(b *testing.B) {
	var bs []authz.Binding
	for i := range 50 {
		bs = append(bs, bind("User:*", authz.Topic, authz.Prefixed, fmt.Sprintf("other-%02d.", i), authz.Read, authz.Allow))
		bs = append(bs, bind(fmt.Sprintf("User:other%02d", i), authz.Topic, authz.Literal, fmt.Sprintf("t%02d", i), authz.Write, authz.Allow))
	}
	bs = append(bs, bind("User:bench", authz.Topic, authz.Literal, "bench", authz.Write, authz.Allow))
	a := newACL(b, bs)
	res := authz.Resource{Type: authz.Topic, Name: "bench"}
	b.ReportAllocs()
	for b.Loop() {
		if !a.Authorize(ctx, "User:bench", authz.Write, res) {
			b.Fatal("denied")
		}
	}
}

func TestAuthorizeAny(t *testing.T) {
	const alice, bob = "User:alice", "User:bob"
	L, P := authz.Literal, authz.Prefixed
	A, D := authz.Allow, authz.Deny
	W := authz.Write
	cases := []struct {
		name     string
		bindings []authz.Binding
		super    []string
		want     authz.Decision
	}{
		{"no binding", nil, nil, authz.Denied},
		{"write on one topic", []authz.Binding{bind(alice, authz.Topic, L, "t", W, A)}, nil, authz.Allowed},
		{"all on one topic", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.All, A)}, nil, authz.Allowed},
		{"write on a prefix", []authz.Binding{bind(alice, authz.Topic, P, "orders-", W, A)}, nil, authz.Allowed},
		{"write on every topic", []authz.Binding{bind(alice, authz.Topic, L, "*", W, A)}, nil, authz.Allowed},
		{"every principal", []authz.Binding{bind("User:*", authz.Topic, L, "t", W, A)}, nil, authz.Allowed},
		{"super user", nil, []string{alice}, authz.Allowed},
		{"another principal's write", []authz.Binding{bind(bob, authz.Topic, L, "t", W, A)}, nil, authz.Denied},
		{"read is not write", []authz.Binding{bind(alice, authz.Topic, L, "t", authz.Read, A)}, nil, authz.Denied},
		{"write on a group is not on a topic", []authz.Binding{bind(alice, authz.Group, L, "t", W, A)}, nil, authz.Denied},
		{"write on the cluster is not on a topic", []authz.Binding{bind(alice, authz.Cluster, L, "kafka-cluster", W, A)}, nil, authz.Denied},
		{"the literal is denied", []authz.Binding{bind(alice, authz.Topic, L, "t", W, A), bind(alice, authz.Topic, L, "t", W, D)}, nil, authz.Denied},
		{"another literal is denied", []authz.Binding{bind(alice, authz.Topic, L, "t", W, A), bind(alice, authz.Topic, L, "u", W, D)}, nil, authz.Allowed},
		{"denied by a prefix", []authz.Binding{bind(alice, authz.Topic, L, "orders-1", W, A), bind(alice, authz.Topic, P, "orders", W, D)}, nil, authz.Denied},
		{"allowed prefix within a denied prefix", []authz.Binding{bind(alice, authz.Topic, P, "orders-1", W, A), bind(alice, authz.Topic, P, "orders", W, D)}, nil, authz.Denied},
		{"allowed prefix wider than a denied one", []authz.Binding{bind(alice, authz.Topic, P, "orders", W, A), bind(alice, authz.Topic, P, "orders-1", W, D)}, nil, authz.Allowed},
		{"allowed prefix, its literal denied", []authz.Binding{bind(alice, authz.Topic, P, "t", W, A), bind(alice, authz.Topic, L, "t", W, D)}, nil, authz.Allowed},
		{"denied everywhere", []authz.Binding{bind(alice, authz.Topic, L, "t", W, A), bind(alice, authz.Topic, L, "*", W, D)}, nil, authz.Denied},
		{"denied everywhere for every principal", []authz.Binding{bind(alice, authz.Topic, L, "t", W, A), bind("User:*", authz.Topic, L, "*", authz.All, D)}, nil, authz.Denied},
		{"a deny of read does not deny write", []authz.Binding{bind(alice, authz.Topic, L, "t", W, A), bind(alice, authz.Topic, L, "*", authz.Read, D)}, nil, authz.Allowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newACL(t, tc.bindings, tc.super...)
			assert.Equal(t, tc.want, a.AuthorizeAny(ctx, alice, W, authz.Topic))
		})
	}
	assert.Equal(t, authz.Allowed, authz.AllowAll{}.AuthorizeAny(ctx, alice, W, authz.Topic))
}
