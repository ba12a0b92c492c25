package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/strata-mesh/strata/internal/httpapi"
)

// runToken makes API tokens and their hashes for acl_tokens:
//
//	strata token new          a random token, and the line for the config
//	strata token hash TOKEN   the SHA-256 the config keeps ("-" reads stdin)
func runToken(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: strata token new | strata token hash TOKEN|-")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, "Usage: strata token new | strata token hash TOKEN|-\n\n  new    print a random API token, and the acl_tokens line for the agent's config (on stderr)\n  hash   print the SHA-256 of TOKEN (- reads it from standard input), as acl_tokens keeps it")
		return nil
	case "new":
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		tok := base64.RawURLEncoding.EncodeToString(b)
		fmt.Fprintln(stdout, tok)
		fmt.Fprintf(stderr, "in the agent's config (the token itself is not kept there):\nacl_tokens:\n  - {name: NAME, sha256: %s, scopes: [read, infer, write]}\n", httpapi.HashToken(tok))
		return nil
	case "hash":
		if len(args) != 2 {
			return errors.New("usage: strata token hash TOKEN|- (- reads the token from standard input)")
		}
		tok := args[1]
		if tok == "-" {
			b, err := io.ReadAll(io.LimitReader(os.Stdin, 4096))
			if err != nil {
				return err
			}
			tok = strings.TrimSpace(string(b))
		}
		if tok == "" {
			return errors.New("empty token")
		}
		fmt.Fprintln(stdout, httpapi.HashToken(tok))
		return nil
	}
	return fmt.Errorf("strata token: unknown subcommand %q: use new or hash", args[0])
}
