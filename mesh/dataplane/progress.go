package dataplane

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// NewProgressPrinter returns a PullRequest.Progress callback that writes to
// w. On a terminal (tty true) it redraws one line with a bar, percentage,
// rate and source count; otherwise it prints a plain line at most every 5 s
// and when the transfer ends, so logs stay readable. The CLI decides tty
// with term.IsTerminal. It is safe for concurrent use.
func NewProgressPrinter(w io.Writer, tty bool) func(TransferStatus) {
	var (
		mu   sync.Mutex
		last time.Time
	)
	return func(st TransferStatus) {
		mu.Lock()
		defer mu.Unlock()
		end := st.State != StateRunning
		if tty {
			fmt.Fprintf(w, "\r%s", FormatProgress(st, 30))
			if end {
				fmt.Fprintln(w)
			}
			return
		}
		if !end && time.Since(last) < 5*time.Second {
			return
		}
		last = time.Now()
		fmt.Fprintln(w, FormatProgress(st, 0))
	}
}

// FormatProgress renders a status as one line: with a bar of width cells
// when width > 0, for example
//
//	model/scorer@v3 [#########.....] 64% 180.2 MiB/1.0 GiB 95.1 MiB/s 3 sources
func FormatProgress(st TransferStatus, width int) string {
	var b strings.Builder
	b.WriteString(st.Ref)
	frac := 1.0
	if st.BytesTotal > 0 {
		frac = float64(st.BytesDone) / float64(st.BytesTotal)
	}
	if width > 0 {
		full := int(frac * float64(width))
		fmt.Fprintf(&b, " [%s%s]", strings.Repeat("#", full), strings.Repeat(".", width-full))
	}
	fmt.Fprintf(&b, " %3.0f%% %s/%s %s/s", frac*100, HumanBytes(st.BytesDone), HumanBytes(st.BytesTotal), HumanBytes(int64(st.RateBytesPerSec)))
	active := 0
	for _, s := range st.Sources {
		if s.Chunks > 0 {
			active++
		}
	}
	fmt.Fprintf(&b, " %d sources", active)
	switch st.State {
	case StateDone:
		b.WriteString(" done")
	case StateFailed:
		b.WriteString(" failed: " + st.Error)
	}
	return b.String()
}

// HumanBytes formats a byte count with binary units: "512 B", "1.5 MiB".
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
