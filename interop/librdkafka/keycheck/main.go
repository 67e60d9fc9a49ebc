// Command keycheck checks the delivery history of ordered_consumer processes
// (interop/librdkafka) in a key-ordered share group with
// internal/testsupport/keyhistory, the checker of the Go tests: per key no
// two records locked at once, the applied ACCEPTs in offset order, every
// record accepted, rejected or archived. Used by run.sh.
//
//	keycheck -topic T -produced FILE -limit N CONSUMER.out...
//
// FILE has one line per produced record, "partition<TAB>offset<TAB>key";
// each CONSUMER.out is an ordered_consumer's stdout. A record's
// acknowledgement counts as applied when the commit after its batch
// reported its partition NO_ERROR, refused on another error, unknown when
// the commit did not name its partition. Exit status 1 on a violation.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sharelog/sharelog/internal/testsupport/keyhistory"
)

func main() {
	topic := flag.String("topic", "", "the topic the consumers read")
	producedFile := flag.String("produced", "", `the produced records, "partition<TAB>offset<TAB>key" per line`)
	limit := flag.Int("limit", 5, "the group's delivery-count limit")
	flag.Parse()
	if *topic == "" || *producedFile == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: keycheck -topic T -produced FILE [-limit N] CONSUMER.out...")
		os.Exit(2)
	}
	produced, err := readProduced(*topic, *producedFile)
	if err != nil {
		fail(err)
	}
	var h keyhistory.History
	for _, name := range flag.Args() {
		if err := readConsumer(&h, *topic, name); err != nil {
			fail(err)
		}
	}
	total := 0
	for _, offs := range produced {
		total += len(offs)
	}
	r := h.Check(produced, *limit)
	fmt.Printf("keycheck: %d records, %d consumers: %v\n", total, flag.NArg(), r)
	for i, v := range r.Violations {
		if i == 10 {
			fmt.Printf("  ... %d more\n", len(r.Violations)-i)
			break
		}
		fmt.Println("  " + v)
	}
	if len(r.Violations) > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "keycheck:", err)
	os.Exit(2)
}

func partitionName(topic, p string) string { return topic + "-" + p }

func readProduced(topic, name string) (map[string]map[int64]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]map[int64]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.SplitN(sc.Text(), "\t", 3)
		if len(fields) != 3 {
			return nil, fmt.Errorf("%s:%d: want partition<TAB>offset<TAB>key", name, n)
		}
		off, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		p := partitionName(topic, fields[0])
		if out[p] == nil {
			out[p] = map[int64]string{}
		}
		out[p][off] = fields[2]
	}
	return out, sc.Err()
}

// readConsumer adds one consumer's history: its batches of got lines, the
// let line of each record, then the results of the batch's commit.
func readConsumer(h *keyhistory.History, topic, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	type rec struct {
		part string
		off  int64
	}
	batch := map[rec]int{}    // the current batch's deliveries
	settled := map[int]bool{} // of those, with an outcome
	finish := func() {        // the batch's records its commit did not name
		for _, id := range batch {
			if !settled[id] {
				h.Outcome(id, keyhistory.Unknown)
			}
		}
		batch, settled = map[rec]int{}, map[int]bool{}
	}
	acked := false // a let or result line since the batch's got lines: the next got starts a batch
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		bad := func(err error) error { return fmt.Errorf("%s:%d: %q: %v", name, n, sc.Text(), err) }
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "got":
			if len(fields) != 6 {
				return bad(fmt.Errorf("want got <ns> <partition> <offset> <count> <key>"))
			}
			if acked {
				finish()
				acked = false
			}
			ns, err1 := strconv.ParseInt(fields[1], 10, 64)
			off, err2 := strconv.ParseInt(fields[3], 10, 64)
			count, err3 := strconv.Atoi(fields[4])
			if err1 != nil || err2 != nil || err3 != nil {
				return bad(fmt.Errorf("numbers"))
			}
			part := partitionName(topic, fields[2])
			batch[rec{part, off}] = h.GotAt(part, fields[5], off, count, time.Unix(0, ns))
		case "let":
			if len(fields) != 5 {
				return bad(fmt.Errorf("want let <ns> <partition> <offset> <type>"))
			}
			ns, err1 := strconv.ParseInt(fields[1], 10, 64)
			off, err2 := strconv.ParseInt(fields[3], 10, 64)
			if err1 != nil || err2 != nil {
				return bad(fmt.Errorf("numbers"))
			}
			id, ok := batch[rec{partitionName(topic, fields[2]), off}]
			if !ok {
				return bad(fmt.Errorf("no delivery of this record in the batch"))
			}
			a := map[string]keyhistory.Ack{"ACCEPT": keyhistory.Accept, "RELEASE": keyhistory.Release, "REJECT": keyhistory.Reject}[fields[4]]
			if a == keyhistory.NoAck {
				return bad(fmt.Errorf("unknown type"))
			}
			h.LetAt(id, a, time.Unix(0, ns))
			acked = true
		case "result":
			if len(fields) != 3 {
				return bad(fmt.Errorf("want result <partition> <error>"))
			}
			acked = true
			part := partitionName(topic, fields[1])
			o := keyhistory.Applied
			if fields[2] != "NO_ERROR" {
				o = keyhistory.Refused
			}
			for r, id := range batch {
				if r.part == part {
					h.Outcome(id, o)
					settled[id] = true
				}
			}
		default:
			return bad(fmt.Errorf("unknown line"))
		}
	}
	finish()
	return sc.Err()
}
