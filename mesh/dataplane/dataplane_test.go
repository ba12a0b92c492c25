package dataplane

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/strata-mesh/strata/mesh/pki"
	"github.com/strata-mesh/strata/storage"
)

// signer is the mesh's artifact signing key in these tests.
var signer = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

type testCA struct{ cert, key []byte }

func newTestCA(tb testing.TB) testCA {
	tb.Helper()
	c, k, err := pki.NewCA("test mesh")
	if err != nil {
		tb.Fatal(err)
	}
	return testCA{c, k}
}

type testNode struct {
	*Node
	name  string
	dir   string
	db    *storage.DB
	store *storage.Store
	key   ed25519.PrivateKey
}

// nodeOpts are the knobs tests change.
type nodeOpts struct {
	addr     string              // listen address; "" = ephemeral loopback port
	trusted  []ed25519.PublicKey // nil = the test signer
	rootCA   *testCA             // CA whose root the node trusts; nil = its own
	mutate   func(*Config)
	noNode   bool // open the store only
	keepOpen bool // the caller closes
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startNode opens a store in dir (a fresh temp dir if empty) and, unless
// o.noNode, a data-plane node with a certificate from ca.
func startNode(tb testing.TB, ca testCA, name, dir string, o nodeOpts) *testNode {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	tn := &testNode{name: name, dir: dir, key: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(len(name)), name[0]}, 16))}
	var err error
	tn.db, err = storage.Open(storage.Options{Dir: filepath.Join(dir, "db")})
	if err != nil {
		tb.Fatal(err)
	}
	trusted := o.trusted
	if trusted == nil {
		trusted = []ed25519.PublicKey{signer.Public().(ed25519.PublicKey)}
	}
	tn.store, err = storage.OpenStore(storage.StoreOptions{Dir: filepath.Join(dir, "artifacts"), DB: tn.db, Trusted: trusted, ChunkSize: 32 << 10, Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	if !o.keepOpen {
		tb.Cleanup(func() { tn.close() })
	}
	if o.noNode {
		return tn
	}
	tn.Node = newDataplane(tb, ca, tn, o)
	return tn
}

func newDataplane(tb testing.TB, ca testCA, tn *testNode, o nodeOpts) *Node {
	tb.Helper()
	cert, err := pki.IssueNodeCert(ca.cert, ca.key, tn.key, tn.name, []string{"127.0.0.1"})
	if err != nil {
		tb.Fatal(err)
	}
	root := ca.cert
	if o.rootCA != nil {
		root = o.rootCA.cert
	}
	srv, err := pki.ServerTLSConfig(root, cert, tn.key)
	if err != nil {
		tb.Fatal(err)
	}
	cli, err := pki.ClientTLSConfig(root, cert, tn.key)
	if err != nil {
		tb.Fatal(err)
	}
	addr := o.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	cfg := Config{
		ListenAddr: addr, Store: tn.store, ServerTLS: srv, ClientTLS: cli,
		HavePoll: 50 * time.Millisecond, ProgressInterval: 10 * time.Millisecond,
		RetryTimeout: 15 * time.Second,
		Logger:       quietLogger(),
	}
	if o.mutate != nil {
		o.mutate(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if !o.keepOpen {
		tb.Cleanup(func() { n.Close() })
	}
	return n
}

func (tn *testNode) close() {
	if tn.Node != nil {
		tn.Node.Close()
	}
	tn.store.Close()
	tn.db.Close()
}

func (tn *testNode) holder() Holder { return Holder{ID: tn.name, Addr: tn.Addr().String()} }

func randomBlob(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func publish(tb testing.TB, tn *testNode, name string, data []byte, key ed25519.PrivateKey) storage.Manifest {
	tb.Helper()
	m, err := tn.store.Publish(context.Background(), bytes.NewReader(data), storage.PublishSpec{
		Kind: storage.KindModel, Name: name, Version: "v1",
		Metadata: map[string]string{"inputs": `[{"name":"x"}]`},
	}, key)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func readModel(tb testing.TB, tn *testNode, name string) []byte {
	tb.Helper()
	path, _, err := tn.store.ModelFile(name, "")
	if err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func TestPushPull(t *testing.T) {
	ca := newTestCA(t)
	a := startNode(t, ca, "a", "", nodeOpts{})
	b := startNode(t, ca, "b", "", nodeOpts{})
	data := randomBlob(1<<20+123, 1)
	m := publish(t, a, "scorer", data, signer)

	var calls int
	res, err := b.Pull(testCtx(t), PullRequest{Kind: storage.KindModel, Name: "scorer", Holders: []Holder{a.holder()},
		Progress: func(TransferStatus) { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Digest != m.Digest {
		t.Errorf("pulled digest %s, want %s", res.Manifest.Digest, m.Digest)
	}
	if !bytes.Equal(readModel(t, b, "scorer"), data) {
		t.Fatal("pulled blob differs from the published one")
	}
	if err := b.store.VerifyBlob(m.Digest); err != nil {
		t.Error(err)
	}
	if res.Status.State != StateDone || res.Status.BytesDone != m.Size || res.Status.Fetched != m.Size {
		t.Errorf("status = %+v, want done with %d bytes fetched", res.Status, m.Size)
	}
	if calls == 0 {
		t.Error("progress callback never called")
	}
	if got := b.Pulling(); len(got) != 0 {
		t.Errorf("Pulling() after the pull = %v, want none", got)
	}
	if got := a.Stats().BytesSent; got != m.Size {
		t.Errorf("holder sent %d bytes, want %d", got, m.Size)
	}
	again, err := b.Pull(testCtx(t), PullRequest{Manifest: m, Holders: []Holder{a.holder()}})
	if err != nil || !again.AlreadyHeld {
		t.Errorf("second pull: AlreadyHeld=%v err=%v, want held", again.AlreadyHeld, err)
	}
	ts := b.Transfers()
	if len(ts) != 1 || ts[0].Digest != m.Digest || ts[0].State != StateDone {
		t.Errorf("Transfers() = %+v, want one done transfer of %s", ts, m.Digest)
	}
}

func TestResumeAfterHolderRestart(t *testing.T) {
	ca := newTestCA(t)
	slow := func(c *Config) { c.EgressBytesPerSec = 2 << 20 }
	a := startNode(t, ca, "a", "", nodeOpts{mutate: slow})
	addr := a.Addr().String()
	b := startNode(t, ca, "b", "", nodeOpts{})
	data := randomBlob(2<<20, 2)
	m := publish(t, a, "scorer", data, signer)

	restarted := make(chan *Node, 1)
	var once bool
	var pulling []string
	progress := func(st TransferStatus) {
		if pulling == nil {
			pulling = b.Pulling()
		}
		if once || st.BytesDone < st.BytesTotal*2/5 {
			return
		}
		once = true
		// Break every connection mid-transfer by stopping the holder, then
		// bring it back on the same address and store.
		go func() {
			a.Node.Close()
			restarted <- newDataplane(t, ca, a, nodeOpts{addr: addr, mutate: slow})
		}()
	}
	res, err := b.Pull(testCtx(t), PullRequest{Manifest: m, Holders: []Holder{{ID: "a", Addr: addr}}, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	a2 := <-restarted
	if diff := cmp.Diff([]string{m.Digest}, pulling); diff != "" {
		t.Errorf("Pulling() during the pull (-want +got):\n%s", diff)
	}
	if !bytes.Equal(readModel(t, b, "scorer"), data) {
		t.Fatal("pulled blob differs")
	}
	sentAfter := a2.Stats().BytesSent
	if sentAfter == 0 || sentAfter >= m.Size {
		t.Errorf("restarted holder sent %d bytes, want 0 < sent < %d (resume, not restart)", sentAfter, m.Size)
	}
	if res.Status.Sources[0].Failures == 0 {
		t.Error("no failed request recorded although the holder went away mid-transfer")
	}
}

func TestCorruptHolderRejected(t *testing.T) {
	ca := newTestCA(t)
	// The good holder serves at 128 KiB/s, so the pull (512 KiB) lasts
	// seconds: long after the bad holder has said what it has, which is
	// when the puller starts asking it too. Unthrottled on loopback, the
	// good holder could serve every chunk before the puller had heard
	// from the bad one, and the bad one would never be asked.
	good := startNode(t, ca, "good", "", nodeOpts{mutate: func(c *Config) { c.EgressBytesPerSec = 128 << 10 }})
	bad := startNode(t, ca, "bad", "", nodeOpts{})
	puller := startNode(t, ca, "puller", "", nodeOpts{})
	data := randomBlob(512<<10, 3)
	m := publish(t, good, "scorer", data, signer)
	publish(t, bad, "scorer", data, signer)
	// Flip a byte of every chunk of the bad holder's copy on disk, so
	// whatever it serves is corrupted.
	f, err := os.OpenFile(bad.store.BlobPath(m.Digest), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Chunks {
		f.WriteAt([]byte{data[int64(i)*m.ChunkSize] ^ 0xff}, int64(i)*m.ChunkSize)
	}
	f.Close()

	// The bad holder is listed first: it is the "nearest".
	res, err := puller.Pull(testCtx(t), PullRequest{Manifest: m, Holders: []Holder{bad.holder(), good.holder()}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readModel(t, puller, "scorer"), data) {
		t.Fatal("pulled blob differs")
	}
	src := map[string]SourceStatus{}
	for _, s := range res.Status.Sources {
		src[s.ID] = s
	}
	if s := src["bad"]; s.State != SourceRejected || s.Rejected == 0 || s.Bytes != 0 {
		t.Errorf("bad holder: %+v, want rejected with no bytes accepted", s)
	}
	if s := src["good"]; s.Bytes != m.Size {
		t.Errorf("good holder gave %d bytes, want %d", s.Bytes, m.Size)
	}
	if st := puller.Stats(); st.ChunksRejected != int64(src["bad"].Rejected) || st.HoldersRejected != 1 {
		t.Errorf("stats = %+v, want %d chunks and 1 holder rejected", st, src["bad"].Rejected)
	}
}

func TestOnlyCorruptHoldersFails(t *testing.T) {
	ca := newTestCA(t)
	bad := startNode(t, ca, "bad", "", nodeOpts{})
	puller := startNode(t, ca, "puller", "", nodeOpts{})
	data := randomBlob(64<<10, 4)
	m := publish(t, bad, "scorer", data, signer)
	if err := os.WriteFile(bad.store.BlobPath(m.Digest), make([]byte, len(data)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := puller.Pull(testCtx(t), PullRequest{Manifest: m, Holders: []Holder{bad.holder()}})
	if !errors.Is(err, ErrNoHolders) {
		t.Fatalf("error = %v, want %v", err, ErrNoHolders)
	}
	if puller.store.Has(m.Digest) {
		t.Error("blob installed from a corrupted holder")
	}
}

func TestManifestRefused(t *testing.T) {
	ca := newTestCA(t)
	stranger := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))
	// The holder trusts the stranger's key as well; the puller does not.
	a := startNode(t, ca, "a", "", nodeOpts{trusted: []ed25519.PublicKey{signer.Public().(ed25519.PublicKey), stranger.Public().(ed25519.PublicKey)}})
	b := startNode(t, ca, "b", "", nodeOpts{})
	data := randomBlob(100<<10, 5)
	good := publish(t, a, "scorer", data, signer)
	unknown := publish(t, a, "rogue", data[:50<<10], stranger)
	tampered := good.Clone()
	tampered.Version = "v2"
	unsigned := good.Clone()
	unsigned.Signature = nil

	tests := []struct {
		name string
		req  PullRequest
		want error
	}{
		{"unknown signer, fetched by name", PullRequest{Kind: storage.KindModel, Name: "rogue"}, storage.ErrUnknownSigner},
		{"unknown signer, given", PullRequest{Manifest: unknown}, storage.ErrUnknownSigner},
		{"tampered", PullRequest{Manifest: tampered}, storage.ErrBadSignature},
		{"unsigned", PullRequest{Manifest: unsigned}, storage.ErrUnsigned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Holders = []Holder{a.holder()}
			_, err := b.Pull(testCtx(t), tt.req)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
		})
	}
	if got := a.Stats().BytesSent; got != 0 {
		t.Errorf("holder sent %d chunk bytes for refused manifests, want 0", got)
	}
	if b.store.Has(unknown.Digest) || b.store.Partial(unknown.Digest) != nil {
		t.Error("blob of a refused manifest loaded")
	}
}

func TestClientFromOtherCARefused(t *testing.T) {
	ca := newTestCA(t)
	other := newTestCA(t)
	a := startNode(t, ca, "a", "", nodeOpts{})
	m := publish(t, a, "scorer", randomBlob(64<<10, 6), signer)
	// The rogue's certificate comes from another CA, but it trusts the real
	// root, so only the holder's check of client certificates can stop it.
	rogue := startNode(t, other, "rogue", "", nodeOpts{rootCA: &ca, mutate: func(c *Config) { c.RetryTimeout = 300 * time.Millisecond }})
	_, err := rogue.Pull(testCtx(t), PullRequest{Manifest: m, Holders: []Holder{a.holder()}})
	if err == nil {
		t.Fatal("pull with a client certificate from another CA succeeded")
	}
	if got := a.Stats(); got.BytesSent != 0 || got.ChunksServed != 0 {
		t.Errorf("holder served %+v to a client from another CA", got)
	}
	if rogue.store.Has(m.Digest) {
		t.Error("rogue holds the blob")
	}
}

func TestPeerAssistedFanOut(t *testing.T) {
	ca := newTestCA(t)
	origin := startNode(t, ca, "origin", "", nodeOpts{mutate: func(c *Config) { c.EgressBytesPerSec = 2 << 20 }})
	data := randomBlob(1<<20, 7)
	m := publish(t, origin, "scorer", data, signer)
	const pullers = 4
	nodes := make([]*testNode, pullers)
	for i := range nodes {
		nodes[i] = startNode(t, ca, string(rune('p'+i))+"uller", "", nodeOpts{})
	}
	errs := make(chan error, pullers)
	for i, n := range nodes {
		var holders []Holder
		for j, o := range nodes {
			if j != i {
				holders = append(holders, o.holder())
			}
		}
		holders = append(holders, origin.holder())
		go func() {
			_, err := n.Pull(testCtx(t), PullRequest{Manifest: m, Holders: holders})
			errs <- err
		}()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if !bytes.Equal(readModel(t, n, "scorer"), data) {
			t.Fatalf("%s holds a different blob", n.name)
		}
	}
	// Without peers the origin would send one copy per puller.
	if sent := origin.Stats().BytesSent; sent >= pullers*m.Size*3/4 {
		t.Errorf("origin sent %d bytes for %d pullers of %d bytes, want well under %d", sent, pullers, m.Size, pullers*m.Size)
	}
}

// The SIGKILL test re-executes the test binary as the puller.
const envPuller = "STRATA_DATAPLANE_TEST_PULLER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(envPuller); dir != "" {
		os.Exit(runPuller(dir))
	}
	os.Exit(m.Run())
}

func TestSIGKILLDuringPull(t *testing.T) {
	ca := newTestCA(t)
	a := startNode(t, ca, "a", "", nodeOpts{mutate: func(c *Config) { c.EgressBytesPerSec = 1 << 20 }})
	data := randomBlob(2<<20, 8)
	m := publish(t, a, "scorer", data, signer)

	dir := t.TempDir()
	mj, _ := jsonMarshal(m)
	writeFiles(t, dir, map[string][]byte{
		"ca.pem": ca.cert, "ca.key": ca.key, "manifest.json": mj, "holder": []byte(a.Addr().String()),
	})
	cmd := exec(t, dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Wait until the puller is well into the transfer, then kill -9 it.
	waitFor(t, 30*time.Second, func() bool { return a.Stats().BytesSent >= m.Size*2/5 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	if sent := a.Stats().BytesSent; sent >= m.Size {
		t.Fatalf("the puller finished (%d bytes sent) before it could be killed", sent)
	}
	// Restart the holder too, so that its counters see only the resumed
	// pull and not the tail of the killed one's streams.
	holderAddr := a.Addr().String()
	a.Node.Close()
	a.Node = newDataplane(t, ca, a, nodeOpts{addr: holderAddr})

	b := startNode(t, ca, "b", dir, nodeOpts{noNode: true, keepOpen: true})
	if b.store.Has(m.Digest) {
		t.Fatal("a killed pull left a visible blob")
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "artifacts", "blobs", "sha256")); len(ents) != 0 {
		t.Fatalf("blob directory holds %d entries after a killed pull", len(ents))
	}
	b.Node = newDataplane(t, ca, b, nodeOpts{})
	defer b.close()
	res, err := b.Pull(testCtx(t), PullRequest{Manifest: m, Holders: []Holder{a.holder()}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readModel(t, b, "scorer"), data) {
		t.Fatal("pulled blob differs")
	}
	st := res.Status
	if st.Resumed == 0 {
		t.Error("nothing resumed after the restart")
	}
	if st.Resumed+st.Fetched != m.Size {
		t.Errorf("resumed %d + fetched %d = %d, want exactly the blob size %d (only what was missing)", st.Resumed, st.Fetched, st.Resumed+st.Fetched, m.Size)
	}
	if sent := a.Stats().BytesSent; sent != st.Fetched {
		t.Errorf("holder sent %d bytes after the restart, puller fetched %d", sent, st.Fetched)
	}
}

// runPuller is the body of the re-executed puller: pull the manifest in
// dir/manifest.json from dir/holder into the store in dir.
func runPuller(dir string) int {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			panic(err)
		}
		return b
	}
	ca := testCA{read("ca.pem"), read("ca.key")}
	var m storage.Manifest
	if err := jsonUnmarshal(read("manifest.json"), &m); err != nil {
		panic(err)
	}
	tb := &panicTB{}
	b := startNode(tb, ca, "b", dir, nodeOpts{keepOpen: true})
	_, err := b.Pull(context.Background(), PullRequest{Manifest: m, Holders: []Holder{{ID: "a", Addr: string(read("holder"))}}})
	if err != nil {
		io.WriteString(os.Stderr, err.Error())
		return 1
	}
	return 0
}
