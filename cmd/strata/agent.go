package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/strata-mesh/strata/agent"
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
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return a.Run(ctx)
}

func runKeygen(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("keygen", "", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(key))
	return nil
}
