package infer

import "sync"

// budget bounds the request bytes in flight, on the whole server and per
// model, so concurrent large requests cannot exhaust memory: a request
// reserves its size before its body is read, and gives it back when it is
// answered. A reservation that does not fit is refused (429), never queued.
type budget struct {
	total, perModel int64

	mu      sync.Mutex
	used    int64
	byModel map[string]int64
}

func newBudget(total, perModel int64) *budget {
	return &budget{total: total, perModel: perModel, byModel: map[string]int64{}}
}

// reserve takes n bytes for model; it reports false, taking nothing, when
// either bound would be passed. release gives the bytes back.
func (b *budget) reserve(model string, n int64) (release func(), ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.total || b.byModel[model]+n > b.perModel {
		return nil, false
	}
	b.used += n
	b.byModel[model] += n
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.used -= n
			if b.byModel[model] -= n; b.byModel[model] <= 0 {
				delete(b.byModel, model) // names come from clients: keep no entry for idle ones
			}
		})
	}, true
}
