package authz

import (
	"cmp"
	"fmt"
	"strings"
)

// ClusterName is the name of the one CLUSTER resource, as in Kafka.
const ClusterName = "kafka-cluster"

// WildcardPrincipal matches every principal.
const WildcardPrincipal = "User:*"

// Wildcard is the literal resource name that covers every name.
const Wildcard = "*"

// ResourceType is the kind of resource a binding covers. The zero value is
// "any" and only has a meaning in a [Filter].
type ResourceType uint8

// Resource types.
const (
	AnyResource ResourceType = iota
	Topic
	Group
	Cluster
	// TransactionalID is a Kafka transactional id (docs/kafka.md
	// "Transactions"), as Kafka's TRANSACTIONAL_ID resource.
	TransactionalID
	numResourceTypes
)

var resourceTypeNames = [...]string{"ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"}

func (t ResourceType) String() string {
	if t < numResourceTypes {
		return resourceTypeNames[t]
	}
	return fmt.Sprintf("ResourceType(%d)", t)
}

// PatternType says how a binding's resource name covers names. The zero
// value is "any"; AnyPattern and Match only have a meaning in a [Filter].
type PatternType uint8

// Pattern types.
const (
	AnyPattern PatternType = iota
	Literal
	Prefixed
	Match
	numPatternTypes
)

var patternTypeNames = [...]string{"ANY", "LITERAL", "PREFIXED", "MATCH"}

func (p PatternType) String() string {
	if p < numPatternTypes {
		return patternTypeNames[p]
	}
	return fmt.Sprintf("PatternType(%d)", p)
}

// Operation is what a principal does to a resource. The zero value is "any"
// and only has a meaning in a [Filter].
type Operation uint8

// Operations (Kafka's names).
const (
	AnyOperation Operation = iota
	All
	Read
	Write
	Create
	Delete
	Alter
	Describe
	AlterConfigs
	DescribeConfigs
	numOperations
)

var operationNames = [...]string{"ANY", "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}

func (o Operation) String() string {
	if o < numOperations {
		return operationNames[o]
	}
	return fmt.Sprintf("Operation(%d)", o)
}

// ParseOperation reads an operation name as kafka-acls.sh writes it
// (case-insensitive, "-" or "_" between words: Read, DescribeConfigs,
// DESCRIBE_CONFIGS, alter-configs).
func ParseOperation(s string) (Operation, error) {
	norm := strings.ToUpper(strings.NewReplacer("-", "", "_", "").Replace(s))
	for o := All; o < numOperations; o++ {
		if strings.ReplaceAll(operationNames[o], "_", "") == norm {
			return o, nil
		}
	}
	return AnyOperation, fmt.Errorf("unknown operation %q (want one of %s)", s, strings.Join(operationNames[All:], ", "))
}

// Permission is ALLOW or DENY. The zero value is "any" and only has a
// meaning in a [Filter].
type Permission uint8

// Permissions.
const (
	AnyPermission Permission = iota
	Allow
	Deny
	numPermissions
)

var permissionNames = [...]string{"ANY", "ALLOW", "DENY"}

func (p Permission) String() string {
	if p < numPermissions {
		return permissionNames[p]
	}
	return fmt.Sprintf("Permission(%d)", p)
}

// Resource is what an operation is performed on.
type Resource struct {
	Type ResourceType
	Name string
}

func (r Resource) String() string { return r.Type.String() + ":" + r.Name }

// Binding is one ACL: Permission of Operation on the resources that
// (ResourceType, PatternType, ResourceName) covers, for Principal.
type Binding struct {
	Principal    string
	ResourceType ResourceType
	PatternType  PatternType
	ResourceName string
	Operation    Operation
	Permission   Permission
}

func (b Binding) String() string {
	return fmt.Sprintf("(principal=%s, resourceType=%s, patternType=%s, resourceName=%s, operation=%s, permission=%s)",
		b.Principal, b.ResourceType, b.PatternType, b.ResourceName, b.Operation, b.Permission)
}

// compareBindings orders bindings for stable listings and files.
func compareBindings(a, b Binding) int {
	return cmp.Or(
		cmp.Compare(a.ResourceType, b.ResourceType),
		cmp.Compare(a.ResourceName, b.ResourceName),
		cmp.Compare(a.PatternType, b.PatternType),
		cmp.Compare(a.Principal, b.Principal),
		cmp.Compare(a.Operation, b.Operation),
		cmp.Compare(a.Permission, b.Permission),
	)
}

// maxNameLen bounds principal and resource names (Kafka's topic limit is
// 249; group ids and principals get more room).
const maxNameLen = 1024

// validPrincipal reports whether p is "User:<name>" with a non-empty name.
func validPrincipal(p string) bool {
	name, ok := strings.CutPrefix(p, "User:")
	return ok && name != "" && len(p) <= maxNameLen
}

// Validate reports why b cannot be stored, or nil.
func (b Binding) Validate() error {
	switch {
	case !validPrincipal(b.Principal):
		return fmt.Errorf("principal must be User:<name> or User:*, got %q", b.Principal)
	case b.ResourceType == AnyResource || b.ResourceType >= numResourceTypes:
		return fmt.Errorf("resource type must be TOPIC, GROUP or CLUSTER, got %s", b.ResourceType)
	case b.PatternType != Literal && b.PatternType != Prefixed:
		return fmt.Errorf("pattern type must be LITERAL or PREFIXED, got %s", b.PatternType)
	case b.ResourceName == "" || len(b.ResourceName) > maxNameLen:
		return fmt.Errorf("resource name must be 1 to %d characters", maxNameLen)
	case b.ResourceType == Cluster && (b.PatternType != Literal || b.ResourceName != ClusterName):
		return fmt.Errorf("a CLUSTER binding must be LITERAL %q", ClusterName)
	case b.PatternType == Prefixed && b.ResourceName == Wildcard:
		return fmt.Errorf("a PREFIXED pattern %q is not a wildcard: use LITERAL %q for every name", Wildcard, Wildcard)
	case b.Operation == AnyOperation || b.Operation >= numOperations:
		return fmt.Errorf("operation must be one of %s, got %s", strings.Join(operationNames[All:], ", "), b.Operation)
	case b.Permission != Allow && b.Permission != Deny:
		return fmt.Errorf("permission must be ALLOW or DENY, got %s", b.Permission)
	}
	return nil
}

// Filter selects bindings; a zero field matches any value (see the package
// documentation for PatternType Match).
type Filter struct {
	Principal    string // "" = any
	ResourceType ResourceType
	PatternType  PatternType
	ResourceName string // "" = any
	Operation    Operation
	Permission   Permission
}

// Validate reports why f is not a filter, or nil.
func (f Filter) Validate() error {
	switch {
	case f.Principal != "" && !validPrincipal(f.Principal):
		return fmt.Errorf("principal must be User:<name>, User:* or unset, got %q", f.Principal)
	case f.ResourceType >= numResourceTypes:
		return fmt.Errorf("unknown resource type %s", f.ResourceType)
	case f.PatternType >= numPatternTypes:
		return fmt.Errorf("unknown pattern type %s", f.PatternType)
	case f.Operation >= numOperations:
		return fmt.Errorf("unknown operation %s", f.Operation)
	case f.Permission >= numPermissions:
		return fmt.Errorf("unknown permission %s", f.Permission)
	case len(f.ResourceName) > maxNameLen:
		return fmt.Errorf("resource name longer than %d characters", maxNameLen)
	}
	return nil
}

// Matches reports whether f selects b.
func (f Filter) Matches(b Binding) bool {
	if f.Principal != "" && f.Principal != b.Principal ||
		f.ResourceType != AnyResource && f.ResourceType != b.ResourceType ||
		f.Operation != AnyOperation && f.Operation != b.Operation ||
		f.Permission != AnyPermission && f.Permission != b.Permission {
		return false
	}
	switch f.PatternType {
	case AnyPattern:
		return f.ResourceName == "" || f.ResourceName == b.ResourceName
	case Match:
		if f.ResourceName == "" {
			return true
		}
		switch b.PatternType {
		case Literal:
			return b.ResourceName == f.ResourceName || b.ResourceName == Wildcard
		case Prefixed:
			return strings.HasPrefix(f.ResourceName, b.ResourceName)
		}
		return false
	default:
		return f.PatternType == b.PatternType && (f.ResourceName == "" || f.ResourceName == b.ResourceName)
	}
}
