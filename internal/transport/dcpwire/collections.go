package dcpwire

// Collections (docs/dcp.md "Collections"): a topic has the default scope
// and collection only (id 0, manifest uid 0). With the HELLO feature
// negotiated, the keys of DCP mutations and deletions carry the collection
// id as an unsigned LEB128 prefix (one 0x00 byte), GET_COLLECTIONS_MANIFEST
// and GET_COLLECTION_ID answer for the default collection, and a stream
// filter or GET_ALL_VB_SEQNOS naming another collection answers
// UNKNOWN_COLLECTION.

import (
	"encoding/binary"
	"strings"

	"github.com/couchbase/gocbcore/v10/memd"
)

// manifestJSON is the collections manifest of every topic.
const manifestJSON = `{"uid":"0","scopes":[{"name":"_default","uid":"0","collections":[{"name":"_default","uid":"0"}]}]}`

func (c *conn) collectionsManifest(p *packet) error {
	if !c.features[memd.FeatureCollections] {
		return c.fail(p, memd.StatusNotSupported, "collections were not negotiated (HELLO)")
	}
	if c.bucket == "" {
		return c.fail(p, memd.StatusNoBucket, "select a bucket (a topic) first")
	}
	return c.reply(p, memd.StatusSuccess, nil, nil, []byte(manifestJSON))
}

// collectionID answers GET_COLLECTION_ID for "scope.collection" (in the
// key, or in the value as older clients send it): the default collection
// is manifest uid 0, collection id 0.
func (c *conn) collectionID(p *packet) error {
	if !c.features[memd.FeatureCollections] {
		return c.fail(p, memd.StatusNotSupported, "collections were not negotiated (HELLO)")
	}
	if c.bucket == "" {
		return c.fail(p, memd.StatusNoBucket, "select a bucket (a topic) first")
	}
	path := string(p.key)
	if path == "" {
		path = string(p.value)
	}
	scope, coll, _ := strings.Cut(path, ".")
	if (scope != "" && scope != "_default") || (coll != "" && coll != "_default") {
		return c.fail(p, memd.StatusCollectionUnknown, errorf("collection %q: only _default._default exists", path))
	}
	extras := binary.BigEndian.AppendUint64(nil, 0) // manifest uid
	extras = binary.BigEndian.AppendUint32(extras, 0)
	return c.reply(p, memd.StatusSuccess, extras, nil, nil)
}
