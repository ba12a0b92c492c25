package infer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// errStopped is returned to requests that reach a batcher that has
// stopped; it cannot happen while a request holds its version (see
// version.close).
var errStopped = errors.New("infer: model version unloaded")

// batcher gathers concurrent requests to one model version into shared
// session calls, with no goroutine of its own: the request that opens a
// batch leads it. The leader waits for one of the runner slots while
// others join its batch, then makes the session call on its own goroutine
// and wakes the rest with their rows. A batch stops taking requests when
// it is full, when its window has passed, or when its leader has a runner.
type batcher struct {
	v       *version
	window  time.Duration
	max     int
	slots   chan struct{} // runner slots: session calls at once
	observe func(rows int)

	mu      sync.Mutex
	open    *batch // the batch taking requests, if any
	stopped bool
	leads   sync.WaitGroup // batches not yet run

	// queued counts requests that joined a batch; tests wait on it.
	queued atomic.Int64
	// callers counts requests inside do; contended is set when two have
	// overlapped and cleared when a batch of one finishes with no other
	// caller inside.
	callers   atomic.Int64
	contended atomic.Bool
}

// batch is one shared session call in the making.
type batch struct {
	reqs   []*batchReq
	rows   int
	sealed bool
	full   chan struct{} // closed when sealed: the leader stops waiting
	done   chan struct{} // closed when every request has its reply
}

type batchReq struct {
	inputs  []Tensor
	rows    int
	outputs []Tensor
	err     error
}

func newBatcher(v *version, window time.Duration, max, runners int, observe func(int)) *batcher {
	return &batcher{
		v:       v,
		window:  window,
		max:     max,
		slots:   make(chan struct{}, runners),
		observe: observe,
	}
}

// do runs inputs (in model order, rows rows each) as part of a batch.
func (b *batcher) do(ctx context.Context, inputs []Tensor, rows int) ([]Tensor, error) {
	// A request alone in the batcher with a runner idle has nobody to share
	// a call with: it runs at once. Once requests have overlapped, they all
	// go through batches until a batch of one finishes with nobody else
	// waiting; otherwise a caller that is alone for a moment would run
	// inline and split the batches.
	n := b.callers.Add(1)
	defer b.callers.Add(-1)
	if n > 1 {
		b.contended.Store(true)
	} else if !b.contended.Load() {
		select {
		case b.slots <- struct{}{}:
			b.observe(rows)
			out, err := b.v.run(inputs)
			<-b.slots
			return out, err
		default:
		}
	}
	r := &batchReq{inputs: inputs, rows: rows}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return nil, errStopped
	}
	bt := b.open
	lead := bt == nil || bt.rows+rows > b.max
	if lead {
		if bt != nil {
			b.seal(bt)
		}
		bt = &batch{full: make(chan struct{}), done: make(chan struct{})}
		b.open = bt
		b.leads.Add(1)
	}
	bt.reqs = append(bt.reqs, r)
	bt.rows += rows
	if bt.rows >= b.max {
		b.seal(bt)
	}
	b.mu.Unlock()
	b.queued.Add(1)
	if lead {
		b.lead(ctx, bt)
	}
	// Once in a batch the request is computed even if the caller gives up.
	select {
	case <-bt.done:
		return r.outputs, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// seal stops bt taking requests. Callers hold b.mu.
func (b *batcher) seal(bt *batch) {
	if bt.sealed {
		return
	}
	bt.sealed = true
	close(bt.full)
	if b.open == bt {
		b.open = nil
	}
}

// lead waits for a runner slot while bt gathers requests, then runs it. A
// leader whose caller gives up hands the batch to a new goroutine.
func (b *batcher) lead(ctx context.Context, bt *batch) {
	timer := time.NewTimer(b.window)
	defer timer.Stop()
	full := bt.full
	for {
		select {
		case b.slots <- struct{}{}:
			b.mu.Lock()
			sealed := bt.sealed
			b.mu.Unlock()
			if !sealed {
				// Callers just handed their replies are runnable and about
				// to send their next request; yielding once lets them join
				// before the batch closes. With nothing else runnable this
				// returns at once, so a lone request does not wait.
				runtime.Gosched()
				b.mu.Lock()
				b.seal(bt)
				b.mu.Unlock()
			}
			b.run(bt)
			<-b.slots
			b.leads.Done()
			return
		case <-full:
			full = nil // stop gathering; wait for a runner
		case <-timer.C:
			b.mu.Lock()
			b.seal(bt)
			b.mu.Unlock()
		case <-ctx.Done():
			go b.lead(context.Background(), bt)
			return
		}
	}
}

// stop refuses new requests and waits for the batches in progress.
func (b *batcher) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	b.leads.Wait()
}

// run makes one session call for the whole batch, hands each request its
// rows of every output, and wakes the requests.
func (b *batcher) run(bt *batch) {
	defer close(bt.done)
	defer func() {
		if p := recover(); p != nil {
			fail(bt.reqs, fmt.Errorf("infer: batch panicked: %v", p))
		}
	}()
	batch, rows := bt.reqs, bt.rows
	b.observe(rows)
	if len(batch) == 1 {
		batch[0].outputs, batch[0].err = b.v.run(batch[0].inputs)
		if b.callers.Load() <= 1 {
			b.contended.Store(false)
		}
		return
	}
	inputs := make([]Tensor, len(b.v.info.Inputs))
	for i, info := range b.v.info.Inputs {
		shape := append([]int64{int64(rows)}, info.Shape[1:]...)
		var data any
		for _, r := range batch {
			data = appendAny(data, r.inputs[i].Data, rows*b.v.rowElems[i])
		}
		inputs[i] = Tensor{Name: info.Name, Datatype: info.Datatype, Shape: shape, Data: data}
	}
	outs, err := b.v.run(inputs)
	if err == nil {
		for _, o := range outs {
			if len(o.Shape) == 0 || o.Shape[0] != int64(rows) {
				err = fmt.Errorf("infer: model %s output %q has shape %v for a batch of %d rows; batching needs outputs with one row per input row", b.v.info.Name, o.Name, o.Shape, rows)
				break
			}
		}
	}
	if err != nil {
		fail(batch, err)
		return
	}
	off := 0
	for _, r := range batch {
		mine := make([]Tensor, len(outs))
		for i, o := range outs {
			per := 1
			for _, d := range o.Shape[1:] {
				per *= int(d)
			}
			shape := append([]int64{int64(r.rows)}, o.Shape[1:]...)
			mine[i] = Tensor{Name: o.Name, Datatype: o.Datatype, Shape: shape, Data: sliceAny(o.Data, off*per, (off+r.rows)*per), Classes: o.Classes}
		}
		off += r.rows
		r.outputs = mine
	}
}

func fail(batch []*batchReq, err error) {
	for _, r := range batch {
		r.outputs, r.err = nil, err
	}
}

// appendAny appends src to dst (both the same slice type; dst may be nil),
// allocating capacity for hint elements on first use.
func appendAny(dst, src any, hint int) any {
	switch s := src.(type) {
	case []bool:
		return appendTyped(dst, s, hint)
	case []uint8:
		return appendTyped(dst, s, hint)
	case []uint16:
		return appendTyped(dst, s, hint)
	case []uint32:
		return appendTyped(dst, s, hint)
	case []uint64:
		return appendTyped(dst, s, hint)
	case []int8:
		return appendTyped(dst, s, hint)
	case []int16:
		return appendTyped(dst, s, hint)
	case []int32:
		return appendTyped(dst, s, hint)
	case []int64:
		return appendTyped(dst, s, hint)
	case []float32:
		return appendTyped(dst, s, hint)
	case []float64:
		return appendTyped(dst, s, hint)
	case []string:
		return appendTyped(dst, s, hint)
	}
	panic(fmt.Sprintf("infer: appendAny of %T", src))
}

func appendTyped[T any](dst any, src []T, hint int) []T {
	d, _ := dst.([]T)
	if d == nil {
		d = make([]T, 0, hint)
	}
	return append(d, src...)
}

// sliceAny returns data[lo:hi] for the slice types a Tensor carries, copied
// so one caller's rows do not pin the whole batch's output.
func sliceAny(data any, lo, hi int) any {
	switch d := data.(type) {
	case []bool:
		return copyRange(d, lo, hi)
	case []uint8:
		return copyRange(d, lo, hi)
	case []uint16:
		return copyRange(d, lo, hi)
	case []uint32:
		return copyRange(d, lo, hi)
	case []uint64:
		return copyRange(d, lo, hi)
	case []int8:
		return copyRange(d, lo, hi)
	case []int16:
		return copyRange(d, lo, hi)
	case []int32:
		return copyRange(d, lo, hi)
	case []int64:
		return copyRange(d, lo, hi)
	case []float32:
		return copyRange(d, lo, hi)
	case []float64:
		return copyRange(d, lo, hi)
	case []string:
		return copyRange(d, lo, hi)
	}
	panic(fmt.Sprintf("infer: sliceAny of %T", data))
}

func copyRange[T any](d []T, lo, hi int) []T {
	return append([]T(nil), d[lo:hi]...)
}

// splittable reports whether a request's rows can run as several session
// calls: every input has a dynamic first dimension and fixed others.
// (Outputs are checked per call: each must have one row per input row.)
func (v *version) splittable() bool {
	for i, in := range v.info.Inputs {
		if in.Shape[0] >= 0 || v.rowElems[i] < 0 {
			return false
		}
	}
	return true
}

// runSplit runs inputs, of rows rows, as consecutive session calls of at
// most chunk rows each, and joins their outputs along the first
// dimension. The working set is then that of one chunk, whatever the
// request's size.
func (v *version) runSplit(inputs []Tensor, rows, chunk int) ([]Tensor, error) {
	var outs []Tensor
	part := make([]Tensor, len(inputs))
	for lo := 0; lo < rows; lo += chunk {
		hi := min(lo+chunk, rows)
		for i, in := range inputs {
			per := v.rowElems[i]
			part[i] = Tensor{Name: in.Name, Datatype: in.Datatype, Shape: append([]int64{int64(hi - lo)}, in.Shape[1:]...), Data: sliceAny(in.Data, lo*per, hi*per)}
		}
		got, err := v.run(part)
		if err != nil {
			return nil, err
		}
		if outs == nil {
			outs = make([]Tensor, len(got))
		}
		for i, o := range got {
			if len(o.Shape) == 0 || o.Shape[0] != int64(hi-lo) {
				return nil, fmt.Errorf("infer: model %s output %q has shape %v for %d rows; a request over %d rows runs in parts, which needs outputs with one row per input row: send fewer rows", v.info.Name, o.Name, o.Shape, hi-lo, chunk)
			}
			per := 1
			for _, d := range o.Shape[1:] {
				per *= int(d)
			}
			outs[i] = Tensor{Name: o.Name, Datatype: o.Datatype, Shape: append([]int64{int64(rows)}, o.Shape[1:]...),
				Data: appendAny(outs[i].Data, o.Data, rows*per), Classes: o.Classes}
		}
	}
	return outs, nil
}
