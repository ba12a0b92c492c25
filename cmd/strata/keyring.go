package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/strata-mesh/strata/api"
)

// runKeyring lists or changes the agent's gossip keys:
//
//	strata keyring                 the keys by fingerprint, * in use
//	strata keyring install KEY     decrypt gossip with KEY too
//	strata keyring use KEY         encrypt gossip with KEY (installed)
//	strata keyring remove KEY      forget KEY (not the one in use)
//
// Rotation runs each step on every agent before the next
// (docs/security.md).
func runKeyring(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("keyring", "[install|use|remove KEY] [-o json|yaml]", stderr)
	c := addClientFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var k api.Keyring
	switch {
	case len(pos) == 0:
		k, err = c.client().Keyring(ctx)
	case len(pos) == 2 && (pos[0] == "install" || pos[0] == "use" || pos[0] == "remove"):
		k, err = c.client().KeyringOp(ctx, pos[0], strings.TrimSpace(pos[1]))
	default:
		return fmt.Errorf("usage: strata keyring [install|use|remove KEY]")
	}
	if err != nil {
		return c.explain(err)
	}
	if c.structured() {
		return c.emitValue(stdout, k)
	}
	for _, key := range k.Keys {
		mark := " "
		if key == k.Primary {
			mark = "*"
		}
		fmt.Fprintf(stdout, "%s %s\n", mark, key)
	}
	return nil
}
