package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/strata-mesh/strata/api"
	"github.com/strata-mesh/strata/api/client"
	"github.com/strata-mesh/strata/infer/drift"
	"github.com/strata-mesh/strata/mesh/dataplane"
	"github.com/strata-mesh/strata/trainer"
)

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressReader reports bytes read to a TransferStatus printer.
type progressReader struct {
	r     io.Reader
	st    dataplane.TransferStatus
	print func(dataplane.TransferStatus)
	start time.Time
	last  time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.st.BytesDone += int64(n)
	if time.Since(p.last) > 200*time.Millisecond || err == io.EOF {
		p.last = time.Now()
		if el := time.Since(p.start).Seconds(); el > 0 {
			p.st.RateBytesPerSec = float64(p.st.BytesDone) / el
		}
		p.print(p.st)
	}
	return n, err
}

func runPush(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("push", "FILE|DIR --name N --version V [--kind dataset|code] [--reference FILE | --reference-from CSV]", stderr)
	c := addClientFlags(fs)
	name := fs.String("name", "", "artifact `name` (required)")
	version := fs.String("version", "", "artifact `version` (required; versions are immutable)")
	kind := fs.String("kind", "model", "`kind`: model, dataset, or code (a training job's script or directory, packed as a tar archive)")
	refFile := fs.String("reference", "", "drift reference `FILE` of a model (reference.json, as the trainer writes it): signed into its manifest, so agents that serve it can detect drift")
	refFrom := fs.String("reference-from", "", "make the model's drift reference from the training data in `CSV` (header row; every column but the label numeric, in the model's input order)")
	refLabel := fs.String("label", "", "the label `column` of --reference-from's CSV, left out of the reference (default: the last column)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *name == "" || *version == "" {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("FILE, --name and --version are required")}
	}
	if err := c.check(); err != nil {
		return err
	}
	var f *os.File
	if *kind == api.KindCode {
		f, err = packCode(pos[0])
	} else {
		f, err = os.Open(pos[0])
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	ref := *kind + "/" + *name + "@" + *version
	pr := &progressReader{r: f, st: dataplane.TransferStatus{Ref: ref + " upload", BytesTotal: st.Size(), State: dataplane.StateRunning},
		print: dataplane.NewProgressPrinter(stderr, isTerminal(stderr)), start: time.Now()}
	spec := client.PushSpec{Kind: *kind, Name: *name, Version: *version}
	switch {
	case *refFile != "" && *refFrom != "":
		return &exitError{code: 1, err: errors.New("give --reference or --reference-from, not both")}
	case *refFile != "":
		if spec.Reference, err = os.ReadFile(*refFile); err != nil {
			return err
		}
	case *refFrom != "":
		if spec.Reference, err = referenceFromCSV(*refFrom, *refLabel); err != nil {
			return &exitError{code: 1, err: err}
		}
	}
	var raw []byte
	var hdr http.Header
	m, err := c.client().Push(context.Background(), spec, pr, st.Size(), client.Body(&raw), client.Header(&hdr))
	err = c.explain(err)
	pr.st.State = dataplane.StateDone
	if err != nil {
		pr.st.State, pr.st.Error = dataplane.StateFailed, "see below"
	}
	pr.print(pr.st)
	if err != nil {
		return err
	}
	if w := hdr.Get("Strata-Warning"); w != "" {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	fmt.Fprintf(stdout, "%s pushed: sha256:%s, %s, signed by %s\n", ref, m.Digest, dataplane.HumanBytes(m.Size), m.Signer)
	return nil
}

// packCode packs a script or directory as a code archive in a temporary
// file (removed already: it lives until closed), ready to push.
func packCode(path string) (*os.File, error) {
	f, err := os.CreateTemp("", "strata-code-*.tar")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	if err := trainer.PackCode(f, path); err != nil {
		f.Close()
		return nil, fmt.Errorf("packing %s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// referenceFromCSV summarizes the feature columns of a training CSV as a
// drift reference (reference.json), as the built-in trainer does for the
// models it makes.
func referenceFromCSV(path, label string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ds, err := trainer.ReadCSV(f, label)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ref, err := drift.SummarizeColumns(ds.Features, ds.X, drift.SummaryOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return json.Marshal(ref)
}

func runModels(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("models", "[NAME] [-o json|yaml]", stderr)
	c := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("at most one model NAME")}
	}
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := readCtx()
	defer cancel()
	var raw []byte
	if len(pos) == 1 {
		m, err := c.client().Model(ctx, pos[0], client.Body(&raw))
		if err != nil {
			return c.explain(err)
		}
		if c.structured() {
			return c.emit(stdout, raw)
		}
		writeModel(stdout, m)
		return nil
	}
	models, err := c.client().Models(ctx, client.Body(&raw))
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tVERSION\tDIGEST\tSIZE\tCREATED\tHOLDERS")
	for _, m := range models {
		for _, v := range m.Versions {
			fmt.Fprintf(tw, "%s\t%s\t%.12s\t%s\t%s\t%s\n", m.Name, v.Version, v.Digest, dataplane.HumanBytes(v.Size),
				v.Created.Local().Format(time.DateTime), dash(strings.Join(holderNames(v.Holders, v.Pulling), ",")))
		}
	}
	return tw.Flush()
}

// writeModel prints one model's versions, newest first, with what each
// says of itself: inputs, outputs, operator sets, producer, and what made
// it.
func writeModel(w io.Writer, m api.Model) {
	for i, v := range m.Versions {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s@%s  %.12s  %s  created %s  held by %s\n", m.Name, v.Version, v.Digest, dataplane.HumanBytes(v.Size),
			v.Created.Local().Format(time.DateTime), dash(strings.Join(holderNames(v.Holders, v.Pulling), ",")))
		for _, f := range []struct{ label, key string }{
			{"inputs", "strata.inputs"}, {"outputs", "strata.outputs"}, {"opsets", "strata.opsets"},
			{"producer", "strata.producer"}, {"trained by", "strata.job"}, {"accuracy", "strata.accuracy"},
		} {
			if s := v.Metadata[f.key]; s != "" {
				fmt.Fprintf(w, "  %-10s %s\n", f.label+":", s)
			}
		}
		if _, ok := v.Metadata["strata.drift.reference"]; ok {
			fmt.Fprintf(w, "  %-10s %s\n", "drift:", "has a reference")
		}
	}
}

// holderNames lists the nodes that hold a blob, then those pulling it,
// marked "(pulling)".
func holderNames(holders, pulling []string) []string {
	out := slices.Clone(holders)
	for _, p := range pulling {
		out = append(out, p+" (pulling)")
	}
	return out
}

func runPull(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pull", "NAME[:VERSION] [--kind dataset] [--output FILE]", stderr)
	c := addClientFlags(fs)
	kind := fs.String("kind", "model", "`kind`: model, dataset or code")
	output := fs.String("output", "", "also write the bytes to `FILE` (- for standard output), checked against the digest")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return &exitError{code: 1, err: fmt.Errorf("NAME[:VERSION] is required")}
	}
	if err := c.check(); err != nil {
		return err
	}
	name, version, _ := strings.Cut(pos[0], ":")
	// The pull runs in the agent; progress comes from /v1/transfers.
	done := make(chan struct{})
	var wg sync.WaitGroup
	print := dataplane.NewProgressPrinter(stderr, isTerminal(stderr))
	cl := c.client()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := readCtx()
			ts, err := cl.Transfers(ctx)
			cancel()
			if err != nil {
				continue
			}
			for _, s := range ts {
				if s.State == api.TransferRunning && strings.Contains(s.Ref, "/"+name+"@") {
					print(transferStatus(s))
				}
			}
		}
	}()
	var raw []byte
	st, err := cl.Pull(context.Background(), *kind, name, version, client.Body(&raw))
	close(done)
	wg.Wait()
	if err != nil {
		return c.explain(err)
	}
	print(transferStatus(st))
	if *output != "" {
		if err := download(cl, *kind, name, version, *output, stdout, stderr); err != nil {
			return c.explain(err)
		}
		if *output == "-" {
			return nil
		}
	}
	if c.structured() {
		return c.emit(stdout, raw)
	}
	fmt.Fprintf(stdout, "%s held here (sha256:%.12s, fetched %s, %s resumed)\n", st.Ref, st.Digest, dataplane.HumanBytes(st.Fetched), dataplane.HumanBytes(st.Resumed))
	return nil
}

// download writes an artifact the agent holds to path ("-": stdout). A file
// appears whole and checked or not at all: the bytes go to a temporary
// file beside it, which is renamed once they hash to the digest.
func download(cl *client.Client, kind, name, version, path string, stdout, stderr io.Writer) error {
	b, err := cl.Blob(context.Background(), kind, name, version)
	if err != nil {
		return err
	}
	defer b.Body.Close()
	h := sha256.New()
	if path == "-" {
		n, err := io.Copy(io.MultiWriter(stdout, h), b.Body)
		if err == nil && (n != b.Size || hex.EncodeToString(h.Sum(nil)) != b.Digest) {
			err = fmt.Errorf("%s: the bytes written do not match its digest sha256:%.12s (%d of %d bytes): discard them", b.Ref, b.Digest, n, b.Size)
		}
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	n, err := io.Copy(io.MultiWriter(f, h), b.Body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != b.Size || got != b.Digest {
		return fmt.Errorf("%s: got %d of %d bytes hashing to sha256:%.12s, not its digest sha256:%.12s; %s not written", b.Ref, n, b.Size, got, b.Digest, path)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (%s, sha256:%.12s)\n", path, dataplane.HumanBytes(n), b.Digest)
	return nil
}

// transferStatus is the progress printer's view of a pull.
func transferStatus(s api.TransferStatus) dataplane.TransferStatus {
	out := dataplane.TransferStatus{Digest: s.Digest, Ref: s.Ref, BytesDone: s.BytesDone, BytesTotal: s.BytesTotal,
		Resumed: s.Resumed, Fetched: s.Fetched, RateBytesPerSec: s.RateBytesPerSec, Started: s.Started, Elapsed: s.Elapsed,
		State: s.State, Error: s.Error}
	for _, src := range s.Sources {
		out.Sources = append(out.Sources, dataplane.SourceStatus{ID: src.ID, Addr: src.Addr, Bytes: src.Bytes, Chunks: src.Chunks,
			Rejected: src.Rejected, Failures: src.Failures, State: src.State})
	}
	return out
}
