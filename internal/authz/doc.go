// Package authz decides whether a principal may perform an operation on a
// resource, with Kafka's ACL model, and keeps the bindings that say so.
//
// # Model
//
// A [Binding] grants (ALLOW) or refuses (DENY) one [Operation] on the
// resources a pattern covers, to one principal ("User:<name>") or to every
// principal ("User:*"). Resources are topics, share groups and the cluster
// (one resource, named [ClusterName]). A LITERAL pattern covers the name
// itself, or every name when it is "*"; a PREFIXED pattern covers every name
// that starts with it.
//
// A request is allowed when some ALLOW binding covers it and no DENY
// binding does: DENY wins, and no binding at all means deny. As in Kafka,
// an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, an ALLOW of
// ALTER_CONFIGS also allows DESCRIBE_CONFIGS, and ALL stands for every
// operation; the implications hold for ALLOW only (a DENY of READ does not
// refuse DESCRIBE), while a DENY of ALL refuses everything. Super users are
// allowed everything before any binding is looked at.
//
// A [Filter] selects bindings as Kafka's AclBindingFilter does: each unset
// field matches anything, and the pattern type MATCH selects the bindings
// that apply to a resource name (its literal binding, the literal "*" one
// and every prefixed binding the name starts with).
//
// # Fast path
//
// [ACL] answers from an immutable index rebuilt on every change (held in an
// atomic pointer): per resource type and principal, a map from literal name
// to the precomputed bit sets of allowed and denied operations, the sets of
// the "*" binding, and the prefixed patterns. A check is two map lookups
// per principal (the caller's and "User:*") plus a scan of that principal's
// prefixed patterns, and allocates nothing.
//
// # Durability
//
// Bindings are kept by a [Store]. [FileStore] writes them as one JSON
// document (acls.json in the data directory) replaced atomically (temporary
// file, fsync, rename, fsync of the directory); a file that does not decode
// is an error at start naming the file, never an empty set. A change is
// acknowledged only after the store saved it, and takes effect for the next
// request.
//
// # Audit
//
// [Audit] writes one structured line per administrative change and per
// denial on the logger attributed logger=audit.
package authz
