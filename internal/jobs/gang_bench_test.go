package jobs_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-mesh/strata/mesh/meshtest"
)

const startJob = `apiVersion: strata/v1
kind: TrainingJob
metadata: {name: %[1]s}
spec:
  gang: {nodes: %[2]d}
  resources: {cpu: 100m, memory: 64Mi}
  launcher: exec
  command: [sh, -c, 'date +%%s%%N > "$STAMPS/$RANK"']
  env: {STAMPS: %[3]q}
  maxDuration: 1m
`

// BenchmarkGangStart measures an exec gang of 2, 4 and 8 members on
// loopback agents: from the apply to the last rank's process running
// (placement, every member's admission, the rendezvous and the start).
func BenchmarkGangStart(b *testing.B) {
	for _, n := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("impl=%d-members", n), func(b *testing.B) {
			agents, _ := gangMesh(b, n, "")
			h := agents[0].Handler()
			var fromApply []float64
			for i := range b.N {
				stamps := b.TempDir()
				name := fmt.Sprintf("start-%d-%d", n, i)
				applied := time.Now()
				if code, body := call(b, h, http.MethodPost, "/v1/policies", []byte(fmt.Sprintf(startJob, name, n, stamps))); code >= 300 {
					b.Fatalf("apply = %d %s", code, body)
				}
				meshtest.WaitFor(b, 60*time.Second, "every rank to start", func() bool {
					ents, _ := os.ReadDir(stamps)
					return len(ents) == n
				})
				var last int64
				for r := range n {
					b, _ := os.ReadFile(filepath.Join(stamps, strconv.Itoa(r)))
					ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
					last = max(last, ns)
				}
				end := time.Unix(0, last)
				fromApply = append(fromApply, end.Sub(applied).Seconds())
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(medianOf(fromApply), "s-apply-to-running")
		})
	}
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}
