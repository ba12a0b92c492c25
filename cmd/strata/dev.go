package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/strata-mesh/strata/agent"
	"github.com/strata-mesh/strata/api/client"
	"github.com/strata-mesh/strata/mesh"
)

func runDev(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", "[--agents N] [--dir DIR] [--api HOST:PORT] [--once]", stderr)
	n := fs.Int("agents", agent.DefaultDevAgents, "number of agents (the multi-tier mix repeats)")
	dir := fs.String("dir", "", "data `directory` kept across runs (default: a temporary one, removed at exit)")
	api := fs.String("api", "127.0.0.1:7470", "API address of the first agent")
	once := fs.Bool("once", false, "exit once the demo story has run (exit 1 if a step failed)")
	level := fs.String("log-level", "warn", "log `level` of the agents")
	format := fs.String("log-format", agent.LogFormatLogfmt, "log `format` of the agents: logfmt or json")
	flat := fs.Bool("no-wan", false, "do not emulate WAN latency between sites (all agents 0 RTT apart)")
	noModel := fs.Bool("no-model", false, "do not run the demo story (train, serve, drift, retrain, roll out)")
	defData := os.Getenv("STRATA_DEMO_DATA")
	if defData == "" {
		defData = ".deps/data/breast_cancer.csv"
	}
	data := fs.String("data", defData, "the demo's dataset `FILE`: scikit-learn's breast_cancer.csv (env STRATA_DEMO_DATA)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return errors.New("--agents must be at least 1")
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "strata-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	logger, err := agent.NewLogger(stderr, *format, lvl)
	if err != nil {
		return fmt.Errorf("--log-format: %w", err)
	}
	keys, err := agent.NewDevPKI()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	var agents []*agent.Agent
	wan := &agent.DevNetwork{}
	for i, cfg := range agent.DevConfigs(*n, *dir, *api) {
		cfg.GossipKey = base64.StdEncoding.EncodeToString(key)
		cfg.Logger = logger
		cfg.PKI = keys
		cfg.Build = readVersion().Short()
		if !*flat {
			cfg.PacketDelay = wan.Delay(cfg.Site)
		}
		if i > 0 {
			cfg.Join = []string{agents[0].Mesh().GossipAddr()}
		}
		a, err := agent.New(cfg)
		if err != nil {
			for _, b := range agents {
				b.Close()
			}
			return fmt.Errorf("starting %s: %w", cfg.Name, err)
		}
		wan.Register(a.Mesh().GossipAddr(), cfg.Site)
		agents = append(agents, a)
	}
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Run(ctx); err != nil {
				logger.Error("agent stopped", "node", a.Name(), "err", err)
			}
		}()
	}
	defer wg.Wait()
	defer stop()

	if err := waitFormed(ctx, agents, 30*time.Second); err != nil {
		return err
	}
	// Plans with a latency bound need every client site's coordinates:
	// the mesh is ready to use once every agent has them.
	if err := waitMeasured(ctx, agents, 30*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "strata dev: %d agents formed a mesh in %s (data in %s)\n\n", len(agents), time.Since(start).Round(time.Millisecond), *dir)
	cl := client.New(agents[0].APIAddr())
	nodes, err := cl.Nodes(ctx, client.NodeFilter{})
	if err != nil {
		return fmt.Errorf("asking %s for the nodes: %w", agents[0].Name(), err)
	}
	printNodes(stdout, nodes, apiAddrs(agents), false)
	fmt.Fprintf(stdout, "\nDashboard: http://%s/ui/   (watch the story below as it happens)\n", agents[0].APIAddr())
	if err := publishExamples(ctx, stdout, cl); err != nil {
		if *once {
			return fmt.Errorf("examples: %w", err)
		}
		fmt.Fprintf(stdout, "examples: %v\n", err)
	}
	if !*noModel {
		fmt.Fprintln(stdout)
		if err := runStory(ctx, stdout, cl, agents, *data); err != nil {
			if *once {
				return fmt.Errorf("demo: %w", err)
			}
			fmt.Fprintf(stdout, "demo: %v\n", err)
		} else {
			fmt.Fprintf(stdout, "\ntry: strata drift; strata jobs; strata logs %s; strata placements; strata events -since 0; strata sim -what-if 'node edge-a-1 down'\n", "screening-retrain-1")
		}
	}
	fmt.Fprintf(stdout, "\nAPI of %s: http://%s   (try: strata members, strata nodes, strata placements, strata models, curl %s/v1/nodes)\n", agents[0].Name(), agents[0].APIAddr(), agents[0].APIAddr())
	fmt.Fprintf(stdout, "Dashboard: http://%s/ui/\n", agents[0].APIAddr())
	if *once {
		return nil
	}
	fmt.Fprintln(stdout, "Ctrl-C stops the mesh.")
	<-ctx.Done()
	fmt.Fprintln(stdout, "\nstopping: agents leave the mesh")
	return nil
}

func apiAddrs(agents []*agent.Agent) map[string]string {
	m := map[string]string{}
	for _, a := range agents {
		m[a.Name()] = a.APIAddr()
	}
	return m
}

// waitFormed waits until every agent sees every other alive with its
// document.
func waitFormed(ctx context.Context, agents []*agent.Agent, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		formed := true
		for _, a := range agents {
			alive := 0
			for _, m := range a.Mesh().Members() {
				if m.Status == mesh.StatusAlive && m.Tier != "" {
					alive++
				}
			}
			if alive != len(agents) {
				formed = false
				break
			}
		}
		if formed {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("the dev mesh did not form within %s", timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitMeasured waits until every agent knows every node's Vivaldi
// coordinate (each publishes its first within seconds of starting).
func waitMeasured(ctx context.Context, agents []*agent.Agent, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		measured := true
		for _, a := range agents {
			for _, n := range a.Mesh().Nodes() {
				if n.Coord == nil {
					measured = false
				}
			}
		}
		if measured {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("the dev mesh's agents had no coordinates for each other within %s", timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
