// Package client calls a strata agent's HTTP API from Go: typed methods,
// context first, that return the wire types of package api.
//
//	c := client.New("127.0.0.1:7470", client.WithToken(os.Getenv("STRATA_TOKEN")))
//	nodes, err := c.Nodes(ctx, client.NodeFilter{Tier: api.TierEdge})
//	if err != nil {
//		return err
//	}
//	_, err = c.Apply(ctx, "svc.yaml", doc)
//	var ae *client.Error
//	if errors.As(err, &ae) {
//		// The agent answered with an error: ae.Status, ae.Message,
//		// ae.Field; a policy that does not parse has ae.Problems.
//	}
//
// Every method is safe for concurrent use. An answer with a status of 300
// or more is an *Error; an agent that cannot be reached gives the error
// of the http.Client (a *url.Error); a context that ends gives its error,
// wrapped. The Body call option keeps the JSON as the agent sent it, for
// programs that pass it on:
//
//	var raw []byte
//	members, err := c.Members(ctx, client.Body(&raw))
package client
