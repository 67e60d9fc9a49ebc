package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Decision is an authorizer's answer.
type Decision bool

// Decisions.
const (
	Denied  Decision = false
	Allowed Decision = true
)

// Authorizer decides whether principal may perform op on res. It is called
// on every request, so implementations answer from memory, fast, and
// without allocating.
type Authorizer interface {
	Authorize(ctx context.Context, principal string, op Operation, res Resource) Decision
	// AuthorizeAny decides whether principal may perform op on at least
	// one resource of type rt, as Kafka's authorizeByResourceType
	// (KIP-679): what an idempotent producer's InitProducerId needs
	// (WRITE on any topic). It is called rarely and may allocate.
	AuthorizeAny(ctx context.Context, principal string, op Operation, rt ResourceType) Decision
}

// AllowAll is the authorizer of --authorizer none: everything is allowed.
type AllowAll struct{}

// Authorize allows.
func (AllowAll) Authorize(context.Context, string, Operation, Resource) Decision { return Allowed }

// AuthorizeAny allows.
func (AllowAll) AuthorizeAny(context.Context, string, Operation, ResourceType) Decision {
	return Allowed
}

// FilterAllowed returns the names in names that principal may perform op on
// (as resources of type rt), in their order; names is not modified.
func FilterAllowed(ctx context.Context, a Authorizer, principal string, op Operation, rt ResourceType, names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if a.Authorize(ctx, principal, op, Resource{Type: rt, Name: n}) {
			out = append(out, n)
		}
	}
	return out
}

// opBits is a set of operations, bit o for Operation o.
type opBits uint16

const allOps = opBits(1<<numOperations-1) &^ 1

// allowBits is what an ALLOW of op allows: op itself, ALL everything, and
// Kafka's implied DESCRIBE and DESCRIBE_CONFIGS.
func allowBits(op Operation) opBits {
	switch op {
	case All:
		return allOps
	case Read, Write, Delete, Alter:
		return 1<<op | 1<<Describe
	case AlterConfigs:
		return 1<<op | 1<<DescribeConfigs
	}
	return 1 << op
}

// denyBits is what a DENY of op refuses: op itself, or everything for ALL
// (implications do not extend a DENY).
func denyBits(op Operation) opBits {
	if op == All {
		return allOps
	}
	return 1 << op
}

type masks struct{ allow, deny opBits }

func (m *masks) add(b Binding) {
	if b.Permission == Deny {
		m.deny |= denyBits(b.Operation)
	} else {
		m.allow |= allowBits(b.Operation)
	}
}

type prefixMasks struct {
	prefix string
	masks
}

// principalIndex is one principal's bindings on one resource type.
type principalIndex struct {
	literal  map[string]masks
	wildcard masks
	prefixed []prefixMasks
}

// index is the immutable lookup structure built from a set of bindings.
type index struct {
	byType [numResourceTypes]map[string]*principalIndex
}

func buildIndex(bindings []Binding) *index {
	idx := &index{}
	for _, b := range bindings {
		m := idx.byType[b.ResourceType]
		if m == nil {
			m = map[string]*principalIndex{}
			idx.byType[b.ResourceType] = m
		}
		pi := m[b.Principal]
		if pi == nil {
			pi = &principalIndex{literal: map[string]masks{}}
			m[b.Principal] = pi
		}
		switch {
		case b.PatternType == Literal && b.ResourceName == Wildcard:
			pi.wildcard.add(b)
		case b.PatternType == Literal:
			e := pi.literal[b.ResourceName]
			e.add(b)
			pi.literal[b.ResourceName] = e
		default:
			i := slices.IndexFunc(pi.prefixed, func(p prefixMasks) bool { return p.prefix == b.ResourceName })
			if i < 0 {
				pi.prefixed = append(pi.prefixed, prefixMasks{prefix: b.ResourceName})
				i = len(pi.prefixed) - 1
			}
			pi.prefixed[i].add(b)
		}
	}
	return idx
}

func (idx *index) collect(principal string, res Resource, acc *masks) {
	if res.Type >= numResourceTypes {
		return
	}
	pi := idx.byType[res.Type][principal]
	if pi == nil {
		return
	}
	if e, ok := pi.literal[res.Name]; ok {
		acc.allow |= e.allow
		acc.deny |= e.deny
	}
	acc.allow |= pi.wildcard.allow
	acc.deny |= pi.wildcard.deny
	for i := range pi.prefixed {
		if p := &pi.prefixed[i]; strings.HasPrefix(res.Name, p.prefix) {
			acc.allow |= p.allow
			acc.deny |= p.deny
		}
	}
}

// ACL is the authorizer of --authorizer acl and the keeper of its
// bindings. Its methods are safe for concurrent use.
type ACL struct {
	super map[string]bool
	idx   atomic.Pointer[index]

	mu       sync.Mutex // serialises changes; guards bindings and store
	bindings []Binding  // sorted by compareBindings, no duplicates
	store    Store
}

// NewACL loads the bindings from store; superUsers ("User:<name>") are
// allowed everything.
func NewACL(ctx context.Context, store Store, superUsers []string) (*ACL, error) {
	a := &ACL{super: map[string]bool{}, store: store}
	for _, u := range superUsers {
		if !validPrincipal(u) || u == WildcardPrincipal {
			return nil, fmt.Errorf("super user %q: want User:<name>", u)
		}
		a.super[u] = true
	}
	bs, err := store.Load(ctx)
	if err != nil {
		return nil, err
	}
	for i, b := range bs {
		if err := b.Validate(); err != nil {
			return nil, fmt.Errorf("%s: binding %d: %w", store, i, err)
		}
	}
	a.bindings = normalize(bs)
	a.idx.Store(buildIndex(a.bindings))
	return a, nil
}

func normalize(bs []Binding) []Binding {
	out := slices.Clone(bs)
	slices.SortFunc(out, compareBindings)
	return slices.Compact(out)
}

// Authorize answers from the current bindings.
func (a *ACL) Authorize(_ context.Context, principal string, op Operation, res Resource) Decision {
	if a.super[principal] {
		return Allowed
	}
	if op == AnyOperation || op >= numOperations {
		return Denied
	}
	var acc masks
	idx := a.idx.Load()
	idx.collect(principal, res, &acc)
	idx.collect(WildcardPrincipal, res, &acc)
	bit := opBits(1) << op
	return Decision(acc.allow&bit != 0 && acc.deny&bit == 0)
}

// AuthorizeAny answers from the current bindings whether some resource of
// type rt exists that principal may perform op on, as Kafka's
// authorizeByResourceType: an ALLOW of op (or an operation that implies
// it) for the principal or User:* on some pattern that no DENY of op
// covers entirely. A DENY on the literal "*" covers everything; a DENY on
// a prefix covers every literal name and every prefix that start with it;
// a literal DENY covers that name only.
func (a *ACL) AuthorizeAny(_ context.Context, principal string, op Operation, rt ResourceType) Decision {
	if a.super[principal] {
		return Allowed
	}
	if op == AnyOperation || op >= numOperations || rt == AnyResource || rt >= numResourceTypes {
		return Denied
	}
	bit := opBits(1) << op
	idx := a.idx.Load()
	var pis []*principalIndex
	for _, p := range []string{principal, WildcardPrincipal} {
		if pi := idx.byType[rt][p]; pi != nil {
			pis = append(pis, pi)
		}
	}
	var denyPrefixes []string
	deniedLiteral := map[string]bool{}
	for _, pi := range pis {
		if pi.wildcard.deny&bit != 0 {
			return Denied
		}
		for _, p := range pi.prefixed {
			if p.deny&bit != 0 {
				denyPrefixes = append(denyPrefixes, p.prefix)
			}
		}
		for n, m := range pi.literal {
			if m.deny&bit != 0 {
				deniedLiteral[n] = true
			}
		}
	}
	coveredByPrefix := func(name string) bool {
		return slices.ContainsFunc(denyPrefixes, func(q string) bool { return strings.HasPrefix(name, q) })
	}
	for _, pi := range pis {
		if pi.wildcard.allow&bit != 0 {
			return Allowed
		}
		for _, p := range pi.prefixed {
			if p.allow&bit != 0 && !coveredByPrefix(p.prefix) {
				return Allowed
			}
		}
		for n, m := range pi.literal {
			if m.allow&bit != 0 && !deniedLiteral[n] && !coveredByPrefix(n) {
				return Allowed
			}
		}
	}
	return Denied
}

// IsSuperUser reports whether principal was named a super user.
func (a *ACL) IsSuperUser(principal string) bool { return a.super[principal] }

// Bindings returns every binding, sorted.
func (a *ACL) Bindings() []Binding {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.bindings)
}

// ErrInvalid marks a binding or filter that is not valid (per item).
var ErrInvalid = errors.New("invalid")

// Create adds bindings. perItem[i] is nil when bs[i] is now stored (adding a
// binding that exists is no change) and an ErrInvalid error otherwise; err
// is a failure to save, in which case nothing changed.
func (a *ACL) Create(ctx context.Context, bs []Binding) (perItem []error, err error) {
	perItem = make([]error, len(bs))
	a.mu.Lock()
	defer a.mu.Unlock()
	next := slices.Clone(a.bindings)
	for i, b := range bs {
		if verr := b.Validate(); verr != nil {
			perItem[i] = fmt.Errorf("%w: %w", ErrInvalid, verr)
			continue
		}
		next = append(next, b)
	}
	next = normalize(next)
	if slices.Equal(next, a.bindings) {
		return perItem, nil
	}
	if err := a.commit(ctx, next); err != nil {
		return nil, err
	}
	return perItem, nil
}

// Describe returns the bindings f selects, sorted.
func (a *ACL) Describe(f Filter) ([]Binding, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Binding
	for _, b := range a.bindings {
		if f.Matches(b) {
			out = append(out, b)
		}
	}
	return out, nil
}

// DeleteResult is what one filter of Delete removed, or why it was not
// applied.
type DeleteResult struct {
	Matched []Binding
	Err     error // ErrInvalid: the filter is not valid
}

// Delete removes every binding some valid filter selects and returns, per
// filter, the bindings it selected; err is a failure to save, in which case
// nothing changed.
func (a *ACL) Delete(ctx context.Context, fs []Filter) ([]DeleteResult, error) {
	out := make([]DeleteResult, len(fs))
	a.mu.Lock()
	defer a.mu.Unlock()
	gone := make([]bool, len(a.bindings))
	changed := false
	for i, f := range fs {
		if err := f.Validate(); err != nil {
			out[i].Err = fmt.Errorf("%w: %w", ErrInvalid, err)
			continue
		}
		for j, b := range a.bindings {
			if f.Matches(b) {
				out[i].Matched = append(out[i].Matched, b)
				gone[j], changed = true, true
			}
		}
	}
	if !changed {
		return out, nil
	}
	next := make([]Binding, 0, len(a.bindings))
	for j, b := range a.bindings {
		if !gone[j] {
			next = append(next, b)
		}
	}
	if err := a.commit(ctx, next); err != nil {
		return nil, err
	}
	return out, nil
}

// commit saves next and then makes it current. a.mu is held.
func (a *ACL) commit(ctx context.Context, next []Binding) error {
	if err := a.store.Save(ctx, next); err != nil {
		return err
	}
	a.bindings = next
	a.idx.Store(buildIndex(next))
	return nil
}
