package infer

import "testing"

func TestIntraOpThreadsLeaveACore(t *testing.T) {
	for _, tc := range []struct{ want, cores, got int }{
		{1, 8, 1},
		{4, 8, 4},
		{8, 8, 7},
		{16, 8, 7},
		{2, 2, 1},
		{2, 1, 1},
	} {
		if got := intraOpThreads(tc.want, tc.cores); got != tc.got {
			t.Errorf("intraOpThreads(%d, %d cores) = %d, want %d", tc.want, tc.cores, got, tc.got)
		}
	}
}
