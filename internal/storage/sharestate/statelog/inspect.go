package statelog

import (
	"fmt"

	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Inspection of a state directory, for tools and tests (damage and crash
// tests build their cases with these).

// ManifestName is the manifest's file name in the state directory.
const ManifestName = manifestName

// FileMagic starts every state-log file.
const FileMagic = fileMagic

// File is one generation file of the state log.
type File struct {
	Gen  uint64
	Name string // base name, in the state directory
}

// Files lists the state log's generation files in dir, oldest first.
func Files(dir string) ([]File, error) {
	fs, err := listGenerations(dir)
	if err != nil {
		return nil, err
	}
	out := make([]File, len(fs))
	for i, f := range fs {
		out[i] = File{Gen: f.gen, Name: f.name}
	}
	return out, nil
}

// FileName is the base name of generation gen's file.
func FileName(gen uint64) string { return genFileName(gen) }

// ReadManifest reads dir's manifest (an error if it is missing or damaged).
func ReadManifest(dir string) (*Manifest, error) { return readManifest(dir) }

// Frame is one whole, checksum-valid frame of a state-log file.
type Frame struct {
	Pos, Len int  // byte offset in the file and length, header included
	Kind     byte // a sharestate.Kind, or 6 for a snapshot marker
	Key      sharestate.PartitionKey
}

// Frames splits the content of a state-log file (magic included) into
// frames; it fails at the first frame that does not decode.
func Frames(b []byte) ([]Frame, error) {
	if len(b) < len(fileMagic) || string(b[:len(fileMagic)]) != fileMagic {
		return nil, fmt.Errorf("not a share state log")
	}
	var out []Frame
	for pos := len(fileMagic); pos < len(b); {
		payload, n, err := readFrame(b[pos:])
		if err != nil {
			return out, fmt.Errorf("byte %d: %w", pos, err)
		}
		k, _, err := decodeKey(payload)
		if err != nil {
			return out, fmt.Errorf("byte %d: %w", pos, err)
		}
		out = append(out, Frame{Pos: pos, Len: n, Kind: k.typ, Key: k.PartitionKey})
		pos += n
	}
	return out, nil
}
