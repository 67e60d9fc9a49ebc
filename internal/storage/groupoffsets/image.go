package groupoffsets

import "sort"

// entry is one change, the payload of a frame.
type entry struct {
	Kind    string      `json:"k"` // "c" commit, "d" delete, "s" empty-since
	Group   string      `json:"g"`
	Offsets []Offset    `json:"o,omitempty"`
	Parts   []Partition `json:"p,omitempty"` // "d": the partitions, unless All
	All     bool        `json:"a,omitempty"` // "d": the whole group
	Meta    *Meta       `json:"m,omitempty"` // "s"
}

type groupImage struct {
	offsets map[Partition]Offset
	meta    Meta
}

// image is the live state a store's entries build.
type image struct{ groups map[string]*groupImage }

func newImage() *image { return &image{groups: map[string]*groupImage{}} }

func (im *image) group(id string) *groupImage {
	g := im.groups[id]
	if g == nil {
		g = &groupImage{offsets: map[Partition]Offset{}}
		im.groups[id] = g
	}
	return g
}

func (im *image) apply(e entry) {
	switch e.Kind {
	case "c":
		g := im.group(e.Group)
		for _, o := range e.Offsets {
			g.offsets[Partition{o.Topic, o.Partition}] = o
		}
	case "d":
		g := im.groups[e.Group]
		if g == nil {
			return
		}
		if e.All {
			delete(im.groups, e.Group)
			return
		}
		for _, p := range e.Parts {
			delete(g.offsets, p)
		}
		if len(g.offsets) == 0 && g.meta == (Meta{}) {
			delete(im.groups, e.Group)
		}
	case "s":
		if e.Meta != nil {
			im.group(e.Group).meta = *e.Meta
		}
	}
}

// groups returns the image as Groups, sorted by id and partition.
func (im *image) list() []Group {
	out := make([]Group, 0, len(im.groups))
	for id, g := range im.groups {
		gr := Group{ID: id, Meta: g.meta}
		for _, o := range g.offsets {
			gr.Offsets = append(gr.Offsets, o)
		}
		sort.Slice(gr.Offsets, func(i, j int) bool {
			a, b := gr.Offsets[i], gr.Offsets[j]
			if a.Topic != b.Topic {
				return a.Topic < b.Topic
			}
			return a.Partition < b.Partition
		})
		out = append(out, gr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// snapshot is the entries that rebuild the image.
func (im *image) snapshot() []entry {
	var out []entry
	for _, g := range im.list() {
		if len(g.Offsets) > 0 {
			out = append(out, entry{Kind: "c", Group: g.ID, Offsets: g.Offsets})
		}
		if g.Meta != (Meta{}) {
			m := g.Meta
			out = append(out, entry{Kind: "s", Group: g.ID, Meta: &m})
		}
	}
	return out
}

// size is the number of offsets held (for the compaction threshold).
func (im *image) size() int {
	n := 0
	for _, g := range im.groups {
		n += len(g.offsets) + 1
	}
	return n
}
