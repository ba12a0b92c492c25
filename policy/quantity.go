package policy

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// decimalRE is the plain decimal number a quantity starts with: no sign,
// no hex, no underscores, no NaN or Inf.
var decimalRE = regexp.MustCompile(`^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$`)

// byteSuffixes maps the suffixes people write after a byte count to their
// multipliers. Binary (Ki, KiB) and decimal (K, KB) forms are both accepted,
// in the Kubernetes spelling and the common one.
var byteSuffixes = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"PiB", 1 << 50},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"PB", 1e15},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15},
	{"B", 1},
}

// ParseBytes parses a byte size as people write it: "512", "500Mi",
// "16GiB", "1.5G", "80GB". It returns the size in bytes, or an error that
// says what form is expected.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty byte size: want a number with an optional unit such as 512Mi or 16GiB")
	}
	mult := 1.0
	num := t
	for _, bs := range byteSuffixes {
		if strings.HasSuffix(t, bs.suffix) {
			mult = bs.mult
			num = strings.TrimSpace(strings.TrimSuffix(t, bs.suffix))
			break
		}
	}
	if strings.HasPrefix(num, "-") && decimalRE.MatchString(num[1:]) {
		return 0, fmt.Errorf("invalid byte size %q: must not be negative", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || !decimalRE.MatchString(num) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid byte size %q: want a number with an optional unit such as 512Mi or 16GiB", s)
	}
	v := f * mult
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("invalid byte size %q: too large", s)
	}
	return int64(math.Round(v)), nil
}

// ParseCPU parses a CPU quantity as Kubernetes writes it: "2" or "1.5" cores,
// or "500m" millicores. It returns millicores.
func ParseCPU(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty cpu quantity: want cores (2, 0.5) or millicores (500m)")
	}
	mult := 1000.0
	if strings.HasSuffix(t, "m") {
		mult = 1
		t = strings.TrimSuffix(t, "m")
	}
	if strings.HasPrefix(t, "-") && decimalRE.MatchString(t[1:]) {
		return 0, fmt.Errorf("invalid cpu quantity %q: must not be negative", s)
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !decimalRE.MatchString(t) || math.IsInf(f, 0) || f*mult > math.MaxInt64 {
		return 0, fmt.Errorf("invalid cpu quantity %q: want cores (2, 0.5) or millicores (500m)", s)
	}
	m := math.Round(f * mult)
	if m == 0 && f != 0 {
		return 0, fmt.Errorf("invalid cpu quantity %q: finer than one millicore (1m)", s)
	}
	return int64(m), nil
}

// FormatBytes renders a byte count with a binary unit, for tables.
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + units[i]
}

// ParseDuration parses a duration as Go writes it ("20ms", "1.5s", "2h30m").
// It rejects negative durations.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a number with a unit such as 20ms, 1.5s or 2h", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid duration %q: must not be negative", s)
	}
	return d, nil
}
