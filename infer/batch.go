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

// errStopped is returned to requests queued on a batcher that has stopped;
// it cannot happen while a request holds its version (see version.close).
var errStopped = errors.New("infer: model version unloaded")

// batcher gathers requests to one model version into shared session calls.
// One goroutine (loop) owns the open batch; finished batches run on their
// own goroutines, at most runners at a time.
type batcher struct {
	v       *version
	window  time.Duration
	max     int
	queue   chan *batchReq
	slots   chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	observe func(rows int)
	// queued counts requests handed to the loop; tests wait on it.
	queued atomic.Int64
	// callers counts requests inside do; contended is set when two have
	// overlapped and cleared when a batch of one finishes with no other
	// caller inside.
	callers   atomic.Int64
	contended atomic.Bool
}

type batchReq struct {
	inputs []Tensor
	rows   int
	reply  chan batchReply
}

type batchReply struct {
	outputs []Tensor
	err     error
}

func newBatcher(v *version, window time.Duration, max, runners int, observe func(int)) *batcher {
	b := &batcher{
		v:       v,
		window:  window,
		max:     max,
		queue:   make(chan *batchReq, 4*max),
		slots:   make(chan struct{}, runners),
		done:    make(chan struct{}),
		observe: observe,
	}
	b.wg.Add(1)
	go b.loop()
	return b
}

// do runs inputs (in model order, rows rows each) as part of a batch.
func (b *batcher) do(ctx context.Context, inputs []Tensor, rows int) ([]Tensor, error) {
	// A request alone in the batcher with a runner idle has nobody to share
	// a call with: it runs on the caller's goroutine, skipping two goroutine
	// hand-offs (a few microseconds, and tens when a thread must be woken).
	// Once requests have overlapped, they all go through the batch loop
	// until a batch of one finishes with nobody else waiting; otherwise a caller
	// that is alone for a moment would run inline and split the batches.
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
	r := &batchReq{inputs: inputs, rows: rows, reply: make(chan batchReply, 1)}
	select {
	case b.queue <- r:
		b.queued.Add(1)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.done:
		return nil, errStopped
	}
	// Once queued the request is computed even if the caller gives up, so
	// the reply channel is buffered and nobody waits on a lost receiver.
	select {
	case rep := <-r.reply:
		return rep.outputs, rep.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (b *batcher) stop() {
	b.once.Do(func() {
		close(b.done)
		b.wg.Wait()
	})
}

func (b *batcher) loop() {
	defer b.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var pending *batchReq
	for {
		first := pending
		pending = nil
		if first == nil {
			select {
			case first = <-b.queue:
			case <-b.done:
				b.drain()
				return
			}
		}
		batch := []*batchReq{first}
		rows := first.rows
		haveSlot := false
		settled := false
		timer.Reset(b.window)
	fill:
		for rows < b.max {
			// Take what is already queued before asking whether a runner is
			// idle, so a busy moment forms one batch, not many of one.
			select {
			case r := <-b.queue:
				if rows+r.rows > b.max {
					pending = r
					break fill
				}
				batch, rows = append(batch, r), rows+r.rows
				settled = false
				continue
			default:
			}
			// Callers just handed their replies are runnable and about to
			// send their next request; yielding once lets them (and any
			// other runnable sender) reach the queue before the batch
			// closes. With nothing else runnable this returns at once, so a
			// lone request does not wait.
			if !settled {
				settled = true
				runtime.Gosched()
				continue
			}
			select {
			case r := <-b.queue:
				if rows+r.rows > b.max {
					pending = r
					break fill
				}
				batch, rows = append(batch, r), rows+r.rows
				settled = false
			case b.slots <- struct{}{}:
				haveSlot = true
				break fill
			case <-timer.C:
				break fill
			case <-b.done:
				timer.Stop()
				fail(batch, errStopped)
				b.drain()
				return
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !haveSlot {
			select {
			case b.slots <- struct{}{}:
			case <-b.done:
				fail(batch, errStopped)
				b.drain()
				return
			}
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() { <-b.slots }()
			b.run(batch, rows)
		}()
	}
}

func (b *batcher) drain() {
	for {
		select {
		case r := <-b.queue:
			r.reply <- batchReply{err: errStopped}
		default:
			return
		}
	}
}

func fail(batch []*batchReq, err error) {
	for _, r := range batch {
		r.reply <- batchReply{err: err}
	}
}

// run makes one session call for the whole batch and hands each request its
// rows of every output.
func (b *batcher) run(batch []*batchReq, rows int) {
	defer func() {
		if p := recover(); p != nil {
			fail(batch, fmt.Errorf("infer: batch panicked: %v", p))
		}
	}()
	b.observe(rows)
	if len(batch) == 1 {
		out, err := b.v.run(batch[0].inputs)
		if len(b.queue) == 0 && b.callers.Load() <= 1 {
			b.contended.Store(false)
		}
		batch[0].reply <- batchReply{outputs: out, err: err}
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
			mine[i] = Tensor{Name: o.Name, Datatype: o.Datatype, Shape: shape, Data: sliceAny(o.Data, off*per, (off+r.rows)*per)}
		}
		off += r.rows
		r.reply <- batchReply{outputs: mine}
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
	}
	panic(fmt.Sprintf("infer: sliceAny of %T", data))
}

func copyRange[T any](d []T, lo, hi int) []T {
	return append([]T(nil), d[lo:hi]...)
}
