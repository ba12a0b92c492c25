package trainer

import (
	"bytes"
	"testing"
)

// FuzzReadCSV: any bytes as a dataset give a dataset or an error, never a
// panic; a dataset read back from its own CSV is the same size.
func FuzzReadCSV(f *testing.F) {
	for _, seed := range []string{
		"a,b,label\n1,2,0\n3,4,1\n",
		"a,label\n1,x\n",
		"label\n\n",
		"a,b\n1\n",
		"\"a\nb\",label\n1,0\n",
		"a,label\nNaN,1\nInf,0\n",
		"a,label\n1,cat\n2,dog\n3,cat\n",
		"a,label\n1,cat\n2,0\n",
	} {
		f.Add([]byte(seed), "label")
	}
	f.Fuzz(func(t *testing.T, b []byte, label string) {
		d, err := ReadCSV(bytes.NewReader(b), label)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := d.WriteCSV(&out); err != nil {
			return
		}
		if _, err := ReadCSV(&out, label); err != nil {
			t.Fatalf("a dataset written by WriteCSV does not read back: %v\n%s", err, out.Bytes())
		}
	})
}
