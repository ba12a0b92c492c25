package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// Output formats of -o. Table is for people; wide is the table with the
// columns that do not fit a terminal (where a command has them, else the
// table); json is the API's answer as it came; yaml is the same answer
// as YAML, keys in the API's order.
const (
	outTable = "table"
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
)

// outputFormats are the values -o takes, in the order help lists them.
var outputFormats = []string{outTable, outWide, outJSON, outYAML}

// structured says whether -o asks for data (json or yaml) rather than a
// table.
func (c *clientFlags) structured() bool { return c.output == outJSON || c.output == outYAML }

// wide says whether -o asks for the wide table.
func (c *clientFlags) wide() bool { return c.output == outWide }

// emit writes raw, a JSON answer of the API, in the -o format: as it is
// for json, converted for yaml.
func (c *clientFlags) emit(w io.Writer, raw []byte) error {
	if c.output != outYAML {
		return write(w, raw)
	}
	b, err := jsonToYAML(raw)
	if err != nil {
		return err
	}
	return write(w, b)
}

// emitValue writes v in the -o format, as indented JSON or as YAML.
func (c *clientFlags) emitValue(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return c.emit(w, append(b, '\n'))
}

// emitStreamed writes one object of a stream (such as an event): a line
// of JSON, or a YAML document after a "---" line.
func (c *clientFlags) emitStreamed(w io.Writer, raw []byte) error {
	if c.output != outYAML {
		return write(w, append(bytes.TrimRight(raw, "\n"), '\n'))
	}
	b, err := jsonToYAML(raw)
	if err != nil {
		return err
	}
	return write(w, append([]byte("---\n"), b...))
}

// jsonToYAML converts a JSON document to block-style YAML, keeping the
// order of its keys and quoting strings only where YAML would read
// them as something else ("true", "12").
func jsonToYAML(raw []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("the agent's answer is not JSON: %w", err)
	}
	var plain func(*yaml.Node)
	plain = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			plain(c)
		}
	}
	plain(&doc)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
