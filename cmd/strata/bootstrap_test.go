package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mesh/strata/internal/httpapi"
	"github.com/strata-mesh/strata/mesh/meshtest"
	"github.com/strata-mesh/strata/trainer/onnx"
)

// TestBootstrapCertificate: a new agent with the mesh CA's certificate but
// not its key asks an agent that holds the key for its node certificate,
// with a token of scope cert, and its data plane works with it (it pulls a
// model from the CA holder). A wrong token, or a name another node holds,
// gets no certificate, and the agent says why and exits.
func TestBootstrapCertificate(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "pki")
	if _, err := cli(t, "unused", "keygen", "-pki", keys); err != nil {
		t.Fatal(err)
	}
	caCfg := filepath.Join(dir, "ca.yaml")
	os.WriteFile(caCfg, []byte(fmt.Sprintf("acl_tokens:\n  - {name: bootstrap, sha256: %s, scopes: [cert]}\n  - {name: admin, sha256: %s, scopes: [read, write]}\n",
		httpapi.HashToken("boot-secret"), httpapi.HashToken("admin-secret"))), 0o600)
	ca := &proc{name: "ca-holder", dir: filepath.Join(dir, "ca"), api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		args: []string{"-config", caCfg, "-data-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			"-ca-cert", filepath.Join(keys, "ca.crt"), "-ca-key", filepath.Join(keys, "ca.key"),
			"-signing-key", filepath.Join(keys, "signing.key"), "-trusted-keys", filepath.Join(keys, "signing.pub")}}
	startAgent(t, ca)
	meshtest.WaitFor(t, 20*time.Second, "the CA holder's API", func() bool { return len(membersOf(t, ca.api)) == 1 })

	newcomer := func(name, token string) *proc {
		tok := filepath.Join(dir, name+".token")
		os.WriteFile(tok, []byte(token+"\n"), 0o600)
		p := &proc{name: name, dir: filepath.Join(dir, name), api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), gossip: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			args: []string{"-join", ca.gossip, "-data-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
				"-ca-cert", filepath.Join(keys, "ca.crt"), "-trusted-keys", filepath.Join(keys, "signing.pub"),
				"-bootstrap", "http://" + ca.api, "-bootstrap-token-file", tok}}
		startAgent(t, p)
		return p
	}
	refused := func(p *proc, want string) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(p.log.String(), want) {
				t.Errorf("%s: exit %v, want an error saying %q:\n%s", p.name, err, want, p.log)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s still runs without a certificate", p.name)
		}
	}
	refused(newcomer("wrong-token", "guess"), "the token is not valid here")
	refused(newcomer("ca-holder", "boot-secret"), "held by another node")

	edge := newcomer("edge-1", "boot-secret")
	meshtest.WaitFor(t, 20*time.Second, "edge-1 in the mesh", func() bool { return len(membersOf(t, ca.api)) == 2 })
	model := filepath.Join(dir, "model.onnx")
	b, _, err := onnx.RandomMLP(7, 4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(model, b, 0o600)
	// The bootstrap token can do nothing else.
	t.Setenv("STRATA_TOKEN", "boot-secret")
	if out, err := cli(t, ca.api, "push", model, "--name", "m", "--version", "1"); err == nil || !strings.Contains(err.Error(), `lacks scope "write"`) {
		t.Errorf("a push with the bootstrap token: %v\n%s", err, out)
	}
	t.Setenv("STRATA_TOKEN", "admin-secret")
	if out, err := cli(t, ca.api, "push", model, "--name", "m", "--version", "1"); err != nil {
		t.Fatalf("push: %v\n%s", err, out)
	}
	meshtest.WaitFor(t, 20*time.Second, "edge-1 pulls the model over the data plane", func() bool {
		out, err := cli(t, edge.api, "pull", "m:1")
		return err == nil && strings.Contains(out, "held here")
	})

	// The certificate is kept: the agent starts again without the token.
	edge.cmd.Process.Signal(syscall.SIGTERM)
	edge.cmd.Wait()
	os.Remove(filepath.Join(dir, "edge-1.token"))
	startAgent(t, edge)
	meshtest.WaitFor(t, 20*time.Second, "edge-1 back, with its data plane", func() bool {
		out, err := cli(t, edge.api, "models", "m")
		return err == nil && strings.Contains(out, "edge-1")
	})
}
