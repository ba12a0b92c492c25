package placement

import "testing"

func TestExprFields(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want fieldMask
	}{
		{`node.tier == "edge"`, 1 << attrTier},
		{`node.tier == "onprem" && node.arch == "amd64"`, 1<<attrTier | 1<<attrArch},
		{`node.labels["rack"] == "r07" ? 1.0 : 0.0`, 1 << attrLabels},
		{`has(node.labels.disk)`, 1 << attrLabels},
		{`node.gpus.exists(g, g.memory >= 16 * GiB && g.model.contains("H100"))`, 1 << attrGPUs},
		{`size(node.gpus) >= 4 && node.gpus.size() <= 8`, 1 << attrGPUs},
		{`node.cpu >= 8000 && node.memory > 1 && node.fabric != "" && node.site == "a" && node.region == "b"`,
			1<<attrCPU | 1<<attrMemory | 1<<attrFabric | 1<<attrSite | 1<<attrRegion},
		{`true`, 0},
		// Identity and load are read per node.
		{`node.name.startsWith("gpu")`, maskUncacheable},
		{`node.id != ""`, maskUncacheable},
		{`node.free_cpu >= 4000`, maskUncacheable},
		{`node.free_memory >= 1`, maskUncacheable},
		{`node.rtt["edge-a"] < 5.0`, maskUncacheable},
		{`node.gpus.exists(g, g.free)`, maskUncacheable},
		{`node.gpus.filter(g, g.memory > 0).size() > 0`, maskUncacheable}, // g escapes into a list
		{`node.gpus.map(g, g).size() > 0`, maskUncacheable},
		{`node.gpus[0].memory > 0`, maskUncacheable},
		{`node.gpus == []`, maskUncacheable},
		{`[node].size() == 1`, maskUncacheable},
		{`node.labels.exists(node, node == "x")`, maskUncacheable},
		{`node.nosuchfield == 1`, maskUncacheable},
		{`node.tier ==`, maskUncacheable}, // does not parse
	} {
		got := analyzeExpr(tc.src)
		if tc.want&maskUncacheable != 0 {
			if got&maskUncacheable == 0 {
				t.Errorf("%s: mask %b, want uncacheable", tc.src, got)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s: mask %b, want %b", tc.src, got, tc.want)
		}
	}
}

func TestClassesPartition(t *testing.T) {
	var b Builder
	mk := func(name, site, rack string, cpu int64) Node {
		return Node{ID: "id-" + name, Name: name, Tier: TierEdge, Site: site, Region: "r", Rack: rack,
			Labels: map[string]string{"rack": rack}, CPU: cpu, FreeCPU: cpu / 2, Memory: 1 << 30, Alive: true}
	}
	b.Add(mk("a", "s1", "x", 1000), mk("b", "s1", "x", 1000), mk("c", "s1", "y", 1000), mk("d", "s2", "x", 1000), mk("e", "s1", "x", 2000))
	s, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	cls := func(name string) int32 { i, _ := s.lookup(name); return s.ix.hot[i].class }
	if cls("a") != cls("b") {
		t.Error("a and b differ only in identity and load: want one class")
	}
	for _, other := range []string{"c", "d", "e"} {
		if cls("a") == cls(other) {
			t.Errorf("a and %s differ in a CEL-readable attribute: want two classes", other)
		}
	}
	if got := len(s.ix.cls.attrs); got != 4 {
		t.Errorf("%d classes, want 4", got)
	}
}
