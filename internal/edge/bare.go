package edge

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// PrincipalsFile is the name, in the data directory, of the record of the
// principals given to bare tokens (docs/principals.md "Bare tokens").
const PrincipalsFile = "auth-principals.json"

// bareRecord is what the server remembers of the principals it gave to
// bare tokens, so that removing or adding a line of the tokens file never
// renumbers another token, across reloads and restarts
// (docs/principals.md "Bare tokens"):
//   - first: each token's SHA-256 → the first User:token-<n> principal it
//     had (a bare line, or a named line "token-<n> <token>"); the token
//     keeps it whenever it is a bare line again;
//   - given: every User:token-<n> name ever given to any token, so that a
//     name is never given to another token, even after its token is gone.
//
// It only grows. The token itself is never stored, only its SHA-256 (as a
// hashed line of the tokens file holds it).
type bareRecord struct {
	path  string // <data-dir>/auth-principals.json; "" = kept in memory only
	first map[[sha256.Size]byte]string
	given map[string]bool
}

// principalsJSON is the file's format, version 1.
type principalsJSON struct {
	Version int `json:"version"`
	// Tokens maps the hex SHA-256 of a token to the first token-<n>
	// principal it was given.
	Tokens map[string]string `json:"tokens"`
	// Given lists every token-<n> principal given so far, sorted.
	Given []string `json:"given"`
}

// loadBareRecord reads the record at path ("" = none, memory only). A
// missing file is an empty record (a new data dir, or an upgrade: bare
// tokens then take the numbers of their lines, as before); a file that
// cannot be read or parsed is an error: guessing could give a token
// another principal.
func loadBareRecord(path string) (*bareRecord, error) {
	r := &bareRecord{path: path, first: map[[sha256.Size]byte]string{}, given: map[string]bool{}}
	if path == "" {
		return r, nil
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bare-token principals %s: %w", path, err)
	}
	var f principalsJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("bare-token principals %s: damaged (%v); restore it from a backup: without it bare tokens could change principal", path, err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("bare-token principals %s: unknown version %d", path, f.Version)
	}
	for h, user := range f.Tokens {
		sum, err := hex.DecodeString(h)
		if err != nil || len(sum) != sha256.Size || !isTokenN(user) {
			return nil, fmt.Errorf("bare-token principals %s: damaged entry %q", path, user)
		}
		r.first[[sha256.Size]byte(sum)] = user
		r.given[user] = true
	}
	for _, user := range f.Given {
		if !isTokenN(user) {
			return nil, fmt.Errorf("bare-token principals %s: damaged entry %q", path, user)
		}
		r.given[user] = true
	}
	return r, nil
}

// isTokenN reports whether user has the form of a bare token's principal,
// User:token-<decimal>.
func isTokenN(user string) bool {
	n, ok := strings.CutPrefix(user, "User:token-")
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// assign gives every bare token of a parsed file its principal, in place:
//  1. a token the record knows takes the principal it was first given;
//  2. a new bare token takes User:token-<its line> when no token ever had
//     that name and no other line of the file holds it;
//  3. else the smallest free User:token-<n> with n above its line (logged).
//
// It refuses a file whose named line "token-<n> <token>" names the
// principal of one of its bare tokens: two tokens would be one principal.
// It returns the record to save if anything was given for the first time
// (nil if nothing changed); r itself is not changed.
func (r *bareRecord) assign(tokens []authToken, log *slog.Logger) (*bareRecord, error) {
	next := &bareRecord{path: r.path, first: maps.Clone(r.first), given: maps.Clone(r.given)}
	changed := false
	named := map[string]int{} // User:<name> of a named line → its first line
	for _, t := range tokens {
		if !t.bare {
			if _, ok := named[t.user]; !ok {
				named[t.user] = t.line
			}
		}
	}
	taken := func(user string) bool { return next.given[user] || named[user] != 0 }
	give := func(t *authToken, user string) {
		t.user = user
		next.first[t.sum] = user
		next.given[user] = true
		changed = true
	}
	var fresh []int // new bare tokens, by index
	for i := range tokens {
		t := &tokens[i]
		if !t.bare {
			continue
		}
		if user, ok := r.first[t.sum]; ok {
			t.user = user
			continue
		}
		fresh = append(fresh, i)
	}
	var later []int
	for _, i := range fresh {
		t := &tokens[i]
		if user := "User:token-" + strconv.Itoa(t.line); !taken(user) {
			give(t, user)
		} else {
			later = append(later, i)
		}
	}
	for _, i := range later {
		t := &tokens[i]
		n := t.line + 1
		for taken("User:token-" + strconv.Itoa(n)) {
			n++
		}
		give(t, "User:token-"+strconv.Itoa(n))
		log.Warn("auth tokens file: a new bare token got a principal other than its line's, whose name was given to another token before (name the line to choose its principal)",
			"line", t.line, "principal", t.user, "not", "User:token-"+strconv.Itoa(t.line))
	}
	bareOf := map[string]int{} // principal of a bare line → that line
	for _, t := range tokens {
		if t.bare {
			if other, ok := bareOf[t.user]; ok {
				// Only when a token first named token-<n> and a token
				// given that name as a bare line are both bare again.
				return nil, fmt.Errorf("line %d: the bare tokens on lines %d and %d both had the principal %s; name one of them",
					t.line, other, t.line, t.user)
			}
			bareOf[t.user] = t.line
			if line, ok := named[t.user]; ok {
				return nil, fmt.Errorf("line %d: the name %s is the principal of the bare token on line %d",
					line, strings.TrimPrefix(t.user, "User:"), t.line)
			}
			continue
		}
		if !isTokenN(t.user) {
			continue
		}
		// A named token-<n> line: the name is given (never to be given to
		// a new bare token), and the token remembers it if it is its first.
		if !next.given[t.user] {
			next.given[t.user] = true
			changed = true
		}
		if _, ok := next.first[t.sum]; !ok {
			next.first[t.sum] = t.user
			changed = true
		}
	}
	if !changed {
		return nil, nil
	}
	return next, nil
}

// errRecordNotSaved marks a failure to save the record: the tokens file
// was fine, so the same file is tried again.
var errRecordNotSaved = errors.New("not saved")

// save writes the record atomically (temp file, fsync, rename, fsync of
// the directory), creating the data directory if needed; nothing to do for
// a record kept in memory.
func (r *bareRecord) save() error {
	if r.path == "" {
		return nil
	}
	f := principalsJSON{Version: 1, Tokens: make(map[string]string, len(r.first)), Given: slices.Sorted(maps.Keys(r.given))}
	for sum, user := range r.first {
		f.Tokens[hex.EncodeToString(sum[:])] = user
	}
	raw, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(r.path), 0o755); err != nil {
		return fmt.Errorf("bare-token principals %w: %w", errRecordNotSaved, err)
	}
	if err := fsutil.WriteFileAtomic(r.path, append(raw, '\n'), fsutil.SyncFileAndDir); err != nil {
		return fmt.Errorf("bare-token principals %s %w: %w", r.path, errRecordNotSaved, err)
	}
	return nil
}
