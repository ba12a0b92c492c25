package placement

// NewPrevious returns an engine that places the way the engine did before
// node classes and top-C selection, for the benchmarks to compare with.
func NewPrevious(opts Options) (*Engine, error) {
	e, err := New(opts)
	if err != nil {
		return nil, err
	}
	e.legacy = true
	return e, nil
}
