package catalog

// Map is Values keyed by each record's key.
func (t *Table[T]) Map() (map[string]T, error) {
	recs, err := t.List()
	return byKey(recs), err
}

// ReadyMap is Ready's values keyed by each record's key: the records whose
// dependencies have replicated here.
func (t *Table[T]) ReadyMap() (map[string]T, error) {
	recs, err := t.Ready()
	return byKey(recs), err
}

func byKey[T any](recs []Record[T]) map[string]T {
	out := make(map[string]T, len(recs))
	for _, r := range recs {
		out[r.Key] = r.Value
	}
	return out
}
