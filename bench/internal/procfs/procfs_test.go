package procfs

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A name with spaces and a ')' must not shift the fields.
	line := []byte("4242 (sharelog (x) srv) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 9 0 100 0 0\n")
	got, err := ParseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3800 * time.Millisecond; got != want {
		t.Fatalf("cpu = %v, want %v", got, want)
	}
	if _, err := ParseStatCPU([]byte("garbage")); err == nil {
		t.Fatal("expected an error for a line without ')'")
	}
	if _, err := ParseStatCPU([]byte("1 (x) S 1 2")); err == nil {
		t.Fatal("expected an error for a short line")
	}
}

func TestParseStatusKB(t *testing.T) {
	status := []byte("Name:\tsharelog-server\nVmPeak:\t 2000000 kB\nVmHWM:\t   51234 kB\nVmRSS:\t   40000 kB\n")
	got, err := ParseStatusKB(status, "VmHWM")
	if err != nil || got != 51234 {
		t.Fatalf("VmHWM = %d, %v", got, err)
	}
	if _, err := ParseStatusKB(status, "VmSwap"); err == nil {
		t.Fatal("missing line must be an error")
	}
	if _, err := ParseStatusKB([]byte("VmHWM:\t 12 MB\n"), "VmHWM"); err == nil {
		t.Fatal("unexpected unit must be an error")
	}
}

// The live readers work on our own process (no network, instant).
func TestSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	pid := os.Getpid()
	if _, err := CPU(pid); err != nil {
		t.Fatal(err)
	}
	rss, err := PeakRSS(pid)
	if err != nil || rss <= 0 {
		t.Fatalf("peak rss %d, %v", rss, err)
	}
}
