// Package safe keeps a panic in an agent's background work from stopping
// the agent. Much of that work reads what peers send (node documents,
// catalog records); a record no check anticipated must cost one pass or
// one item, never the process. A Guard recovers the panic, logs it at
// Error with its stack, counts it in strata_panics_recovered_total by
// component, and lets the work go on:
//
//	g := safe.New(safe.Config{Logger: log, Registerer: reg})
//	go g.Loop(ctx, "controller", ctrl.Run)          // restarted after a pause
//	g.Go("serving", func() { loader.load(ctx, m) }) // that item is dropped
//	if g.Do("events", stream.scan) != nil { g.Wait(ctx) }
//
// A recovered panic leaves whatever the panicking code was changing as it
// was; code run under a Guard releases its locks with defer.
package safe
