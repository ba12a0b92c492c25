package trainer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBackpropMatchesFiniteDifferences checks the analytic cross-entropy
// gradient against central differences for a sigmoid and a softmax head.
func TestBackpropMatchesFiniteDifferences(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
		y     int
	}{
		{name: "logistic", sizes: []int{3, 1}, y: 1},
		{name: "mlp-sigmoid", sizes: []int{3, 5, 1}, y: 0},
		{name: "mlp-softmax", sizes: []int{4, 6, 5, 3}, y: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			n := newNet(tc.sizes, rng)
			for l := range n.b {
				for k := range n.b[l] {
					n.b[l][k] = rng.NormFloat64() * 0.1
				}
			}
			x := make([]float64, tc.sizes[0])
			for i := range x {
				x[i] = rng.NormFloat64()
			}
			ws := n.workspace()
			g := n.zeroLike()
			n.backprop(x, tc.y, ws, g)
			loss := func() float64 { return crossEntropy(n.forward(x, ws), tc.y) }
			const h = 1e-6
			check := func(what string, p []float64, grad []float64) {
				for k := range p {
					orig := p[k]
					p[k] = orig + h
					up := loss()
					p[k] = orig - h
					down := loss()
					p[k] = orig
					num := (up - down) / (2 * h)
					if math.Abs(num-grad[k]) > 1e-5*math.Max(1, math.Abs(num)) {
						t.Fatalf("%s[%d]: backprop %g, finite difference %g", what, k, grad[k], num)
					}
				}
			}
			for l := range n.w {
				check("w", n.w[l], g.w[l])
				check("b", n.b[l], g.b[l])
			}
		})
	}
}
