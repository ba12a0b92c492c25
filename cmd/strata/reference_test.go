package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-mesh/strata/infer/drift"
)

func TestReferenceFromCSV(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "train.csv")
	var b strings.Builder
	b.WriteString("age,dose,label\n")
	for i := range 200 {
		fmt.Fprintf(&b, "%d,%d,%d\n", 20+i%50, i%7, i%2)
	}
	os.WriteFile(good, []byte(b.String()), 0o644)
	raw, err := referenceFromCSV(good, "label")
	if err != nil {
		t.Fatal(err)
	}
	var ref drift.Reference
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Features) != 2 || ref.Features[0].Name != "age" || ref.Features[1].Name != "dose" || ref.Prediction != nil {
		t.Errorf("reference features %+v, want age and dose (the label left out)", ref.Features)
	}
	for _, f := range ref.Features {
		if err := f.Validate(); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
	}
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("age,label\n12,0\nold,1\n"), 0o644)
	if _, err := referenceFromCSV(bad, "label"); err == nil || !strings.Contains(err.Error(), "bad.csv") || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("a non-numeric feature: %v, want an error naming the file and line 3", err)
	}
}
