// Package procfs reads the two per-process figures the report needs from
// Linux /proc: CPU time (utime+stime of /proc/<pid>/stat) and peak resident
// set size (VmHWM of /proc/<pid>/status), and resets the peak between phases
// (writing 5 to /proc/<pid>/clear_refs, Linux >= 4.0).
package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat. It is
// 100 on every mainstream Linux architecture (sysconf(_SC_CLK_TCK)); Go
// cannot ask sysconf without cgo.
const ClockTicks = 100

// ParseStatCPU returns utime+stime of a /proc/<pid>/stat line. The command
// name (field 2) is in parentheses and may itself contain spaces and
// parentheses, so fields are counted after the last ')'.
func ParseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("procfs: malformed stat line")
	}
	fields := strings.Fields(string(stat[i+1:]))
	// After ')': field 3 (state) is fields[0]; utime is field 14, stime 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("procfs: stat line has %d fields after the name", len(fields))
	}
	utime, err := strconv.ParseUint(fields[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("procfs: utime: %w", err)
	}
	stime, err := strconv.ParseUint(fields[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("procfs: stime: %w", err)
	}
	return time.Duration(utime+stime) * time.Second / ClockTicks, nil
}

// ParseStatusKB returns the value in kB of a "Name:   1234 kB" line of
// /proc/<pid>/status.
func ParseStatusKB(status []byte, name string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Text()
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, fmt.Errorf("procfs: %s has no value", name)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procfs: %s: %w", name, err)
		}
		if len(f) > 1 && f[1] != "kB" {
			return 0, fmt.Errorf("procfs: %s: unexpected unit %q", name, f[1])
		}
		return n, nil
	}
	return 0, fmt.Errorf("procfs: no %s line", name)
}

// CPU is the CPU time (user+system) the process has used so far.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return ParseStatCPU(b)
}

// PeakRSS is the process's peak resident set size (VmHWM) in bytes.
func PeakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	kb, err := ParseStatusKB(b, "VmHWM")
	return kb * 1024, err
}

// ResetPeakRSS sets the process's VmHWM to its current RSS, so the next
// PeakRSS covers one phase only.
func ResetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}
