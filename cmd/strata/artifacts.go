package main

import (
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/strata-mesh/strata/mesh/dataplane"
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
	fs := newFlags("push", "FILE --name N --version V [--kind dataset]", stderr)
	c := addClientFlags(fs)
	name := fs.String("name", "", "artifact `name` (required)")
	version := fs.String("version", "", "artifact `version` (required; versions are immutable)")
	kind := fs.String("kind", "model", "`kind`: model or dataset")
	refFile := fs.String("reference", "", "drift reference `FILE` of a model (reference.json, as the trainer writes it): signed into its manifest, so agents that serve it can detect drift")
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
	f, err := os.Open(pos[0])
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
	q := url.Values{"name": {*name}, "version": {*version}, "kind": {*kind}}
	var m struct {
		Digest string `json:"digest"`
		Size   int64  `json:"size"`
		Signer string `json:"signer"`
	}
	var raw []byte
	if *refFile != "" {
		refBytes, rerr := os.ReadFile(*refFile)
		if rerr != nil {
			return rerr
		}
		// multipart: the reference first, then the file, streamed.
		body, w := io.Pipe()
		mw := multipart.NewWriter(w)
		go func() {
			err := func() error {
				rp, err := mw.CreateFormFile("reference", filepath.Base(*refFile))
				if err != nil {
					return err
				}
				if _, err := rp.Write(refBytes); err != nil {
					return err
				}
				fp, err := mw.CreateFormFile("file", filepath.Base(pos[0]))
				if err != nil {
					return err
				}
				if _, err := io.Copy(fp, pr); err != nil {
					return err
				}
				return mw.Close()
			}()
			w.CloseWithError(err)
		}()
		err = c.request(http.MethodPost, "/v1/artifacts?"+q.Encode(), mw.FormDataContentType(), body, -1, &m, &raw)
	} else {
		err = c.doStream(http.MethodPost, "/v1/artifacts?"+q.Encode(), pr, st.Size(), &m, &raw)
	}
	pr.st.State = dataplane.StateDone
	if err != nil {
		pr.st.State, pr.st.Error = dataplane.StateFailed, "see below"
	}
	pr.print(pr.st)
	if err != nil {
		return err
	}
	if c.output == "json" {
		_, err := stdout.Write(raw)
		return err
	}
	fmt.Fprintf(stdout, "%s pushed: sha256:%s, %s, signed by %s\n", ref, m.Digest, dataplane.HumanBytes(m.Size), m.Signer)
	return nil
}

func runModels(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("models", "[-o json]", stderr)
	c := addClientFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	var models []struct {
		Name     string `json:"name"`
		Versions []struct {
			Version string    `json:"version"`
			Digest  string    `json:"digest"`
			Size    int64     `json:"size"`
			Created time.Time `json:"created"`
			Holders []string  `json:"holders"`
			Pulling []string  `json:"pulling"`
		} `json:"versions"`
	}
	var raw []byte
	if err := c.get("/v1/models", &models, &raw); err != nil {
		return err
	}
	if c.output == "json" {
		_, err := stdout.Write(raw)
		return err
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
	fs := newFlags("pull", "NAME[:VERSION] [--kind dataset]", stderr)
	c := addClientFlags(fs)
	kind := fs.String("kind", "model", "`kind`: model or dataset")
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
	q := url.Values{"name": {name}, "kind": {*kind}}
	if version != "" {
		q.Set("version", version)
	}
	// The pull runs in the agent; progress comes from /v1/transfers.
	done := make(chan struct{})
	var wg sync.WaitGroup
	print := dataplane.NewProgressPrinter(stderr, isTerminal(stderr))
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
			var ts []dataplane.TransferStatus
			if c.get("/v1/transfers", &ts, nil) != nil {
				continue
			}
			for _, s := range ts {
				if s.State == dataplane.StateRunning && strings.Contains(s.Ref, "/"+name+"@") {
					print(s)
				}
			}
		}
	}()
	var st dataplane.TransferStatus
	var raw []byte
	err = c.do(http.MethodPost, "/v1/artifacts/pull?"+q.Encode(), "", nil, &st, &raw)
	close(done)
	wg.Wait()
	if err != nil {
		return err
	}
	print(st)
	if c.output == "json" {
		_, err := stdout.Write(raw)
		return err
	}
	fmt.Fprintf(stdout, "%s held here (sha256:%.12s, fetched %s, %s resumed)\n", st.Ref, st.Digest, dataplane.HumanBytes(st.Fetched), dataplane.HumanBytes(st.Resumed))
	return nil
}
