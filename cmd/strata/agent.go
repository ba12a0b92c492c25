package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/strata-mesh/strata/agent"
	"github.com/strata-mesh/strata/mesh/pki"
)

func runAgent(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("agent", "[-config FILE] [flags]", stderr)
	load := agent.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags start with -)", fs.Arg(0))
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	cfg.Build = readVersion().Short()
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP (systemctl reload) reads the configuration again, file and
	// flags, and applies what can change while running; the agent logs
	// what it applied and what needs a restart.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_, _ = a.ReloadFrom(load) // logged and counted
			}
		}
	}()
	return a.Run(ctx)
}

func runKeygen(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("keygen", "[-pki DIR]", stderr)
	dir := fs.String("pki", "", "also write the mesh CA (ca.crt, ca.key) and an artifact signing key (signing.key, signing.pub) into `DIR`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(key))
	if *dir == "" {
		return nil
	}
	caCert, caKey, err := pki.NewCA("strata mesh CA")
	if err != nil {
		return err
	}
	sk, err := pki.NewSigningKey()
	if err != nil {
		return err
	}
	skPEM, err := pki.EncodePrivateKey(sk)
	if err != nil {
		return err
	}
	pubPEM, err := pki.EncodePublicKey(sk.Public().(ed25519.PublicKey))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{"ca.crt", caCert, 0o644}, {"ca.key", caKey, 0o600}, {"signing.key", skPEM, 0o600}, {"signing.pub", pubPEM, 0o644}} {
		p := filepath.Join(*dir, f.name)
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s exists: keygen never overwrites keys", p)
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "wrote %s/{ca.crt,ca.key,signing.key,signing.pub}\nin each agent's config: ca_cert, ca_key (or node_cert), trusted_keys: signing.pub; signing_key only where artifacts are pushed\n", *dir)
	return nil
}
