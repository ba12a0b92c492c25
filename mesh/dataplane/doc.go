// Package dataplane moves artifact blobs between agents over QUIC with TLS
// 1.3 mutual authentication (certificates from mesh/pki).
//
// A Node both serves and pulls. It serves whole blobs from its
// storage.Store and, while it is itself pulling, the chunks it has already
// verified, so pullers help each other (peer-assisted fan-out: the origin
// sends about one copy, not one per puller). Pulls are chunked (the chunk
// size is the manifest's), run several streams per holder and several
// holders at once, verify every chunk against the signed manifest and the
// whole digest at the end, reject a holder that serves a corrupted chunk,
// and resume from the verified chunks after a broken connection or a
// restart, because progress lives in the store's partial downloads.
//
//	n, err := dataplane.New(dataplane.Config{
//		ListenAddr: ":7471",
//		Store:      store,
//		ServerTLS:  srvTLS, // pki.ServerTLSConfig(...)
//		ClientTLS:  cliTLS, // pki.ClientTLSConfig(...)
//	})
//	defer n.Close()
//	res, err := n.Pull(ctx, dataplane.PullRequest{
//		Kind: storage.KindModel, Name: "fraud-scorer", Version: "v3",
//		Holders: []dataplane.Holder{{ID: "b", Addr: "10.0.0.7:7471"}}, // nearest first
//		Progress: dataplane.NewProgressPrinter(os.Stderr, isTerminal),
//	})
//
// The wire protocol is one request per bidirectional stream: a one-byte
// opcode and its fields, answered by a status byte and a length-prefixed
// body. Opcodes: chunk (digest, offset, length, flags), have (digest;
// long-polls for the holder's next verified chunk), manifest (kind, name,
// version), done (digest: the puller holds the blob now) and http (an
// HTTP/1.1 request, answered by an HTTP/1.1 response instead of a status
// byte: see Node.RoundTrip and Config.Handler; agents forward inference and
// fetch job logs this way). RoundTrip is addressed to a Peer, not only an
// address: the server's certificate must name that node (and its key derive
// to the node's ID), or nothing is sent.
//
// Where a holder's QUIC address does not answer (another site, behind a
// NAT) and the holder has a Peer, the same requests go over a Stream of
// another transport (Node.SetRelay; the federation's libp2p streams). Such
// a stream starts with the puller's node certificate, which the holder
// checks against the mesh CA and the key the transport authenticated
// (Node.ServeRelayed); proxied HTTP is not served that way.
//
// Fan-out. Pulls pick chunks rarest first with random tie-breaks, from the
// least-loaded holder that has them. A holder of a whole blob it did not
// just pull itself super-seeds: until every chunk has gone out once it sends
// each chunk to one active puller and answers the others with a chunk not
// yet sent (or, failing that, "fetch it from your peers"); under an
// egress cap it sends two chunks at a time at full rate and answers busy
// beyond a short queue, so pullers spread their requests over the peers.
// An origin then sends about one copy however many agents pull.
package dataplane
