package policy

import (
	"strings"
	"testing"
	"time"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr string // substring; "" means no error
	}{
		{"512", 512, ""},
		{"0", 0, ""},
		{"500Mi", 500 << 20, ""},
		{"16GiB", 16 << 30, ""},
		{"2Ki", 2048, ""},
		{"1.5Gi", 3 << 29, ""},
		{"1Ti", 1 << 40, ""},
		{"1PiB", 1 << 50, ""},
		{"1.5G", 1500000000, ""},
		{"80GB", 80e9, ""},
		{"10k", 10000, ""},
		{"10K", 10000, ""},
		{"3MB", 3e6, ""},
		{"64B", 64, ""},
		{" 1Gi ", 1 << 30, ""},
		{"1e3", 1000, ""},
		{"", 0, "empty byte size"},
		{"-1Gi", 0, "must not be negative"},
		{"lots", 0, "want a number with an optional unit"},
		{"1.5.5G", 0, "want a number"},
		{"16Gb", 0, "want a number"},
		{"Gi", 0, "want a number"},
		{"0x10", 0, "want a number"},
		{"1_000", 0, "want a number"},
		{"NaN", 0, "want a number"},
		{"Inf", 0, "want a number"},
		{"+5", 0, "want a number"},
		{"9999999PiB", 0, "too large"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseBytes(tc.in)
			checkQuantity(t, got, err, tc.want, tc.wantErr)
		})
	}
}

func TestParseCPU(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"2", 2000, ""},
		{"0.5", 500, ""},
		{"500m", 500, ""},
		{"1.25", 1250, ""},
		{"0", 0, ""},
		{"0.001", 1, ""},
		{"96", 96000, ""},
		{"", 0, "empty cpu quantity"},
		{"m", 0, "want cores"},
		{"-2", 0, "must not be negative"},
		{"two", 0, "want cores"},
		{"2 cores", 0, "want cores"},
		{"500mm", 0, "want cores"},
		{"0.0001", 0, "finer than one millicore"},
		{"1e300", 0, "want cores"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseCPU(tc.in)
			checkQuantity(t, got, err, tc.want, tc.wantErr)
		})
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"20ms", 20 * time.Millisecond, ""},
		{"1.5s", 1500 * time.Millisecond, ""},
		{"2h", 2 * time.Hour, ""},
		{"2h30m", 150 * time.Minute, ""},
		{"250us", 250 * time.Microsecond, ""},
		{"0", 0, ""},
		{"20", 0, "want a number with a unit"},
		{"-1s", 0, "must not be negative"},
		{"soon", 0, "want a number with a unit"},
		{"1d", 0, "want a number with a unit"},
		{"", 0, "want a number with a unit"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseDuration(tc.in)
			checkQuantity(t, int64(got), err, int64(tc.want), tc.wantErr)
		})
	}
}

func checkQuantity(tb testing.TB, got int64, err error, want int64, wantErr string) {
	tb.Helper()
	switch {
	case wantErr == "" && err != nil:
		tb.Fatalf("unexpected error: %v", err)
	case wantErr != "" && err == nil:
		tb.Fatalf("got %d, want an error containing %q", got, wantErr)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		tb.Fatalf("error %q, want one containing %q", err, wantErr)
	case got != want:
		tb.Fatalf("got %d, want %d", got, want)
	}
}

func TestFormatBytes(t *testing.T) {
	for in, want := range map[int64]string{0: "0 B", 512: "512 B", 1536: "1.5 KiB", 80 << 30: "80 GiB", 3 << 40: "3 TiB"} {
		if got := FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", in, got, want)
		}
	}
}
