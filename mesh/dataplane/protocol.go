package dataplane

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// Opcodes of requests.
const (
	opChunk    byte = 1
	opHave     byte = 2
	opManifest byte = 3
	opDone     byte = 4 // digest: the puller has the whole blob now
	opHTTP     byte = 5 // an HTTP/1.1 request, answered by an HTTP/1.1 response
)

// Statuses of responses.
const (
	statusOK      byte = 0
	statusMissing byte = 1
	statusError   byte = 2
	// statusSeeded answers a chunk request without force when the holder
	// is sending, or has just sent, that chunk to another puller: the
	// puller should get it from that peer instead (super-seeding).
	statusSeeded byte = 3
	// statusBusy answers a chunk request when the holder already has a
	// queue of chunks to send under its egress cap: ask another holder.
	statusBusy byte = 4
)

// Flags of chunk requests.
const (
	// flagForce asks for the chunk even if it was seeded to another
	// puller.
	flagForce byte = 1
)

// Application error codes for closing connections and streams.
const (
	codeNone     = 0
	codeShutdown = 1
	codeCanceled = 2
)

const maxBody = 1 << 30

func putDigest(b []byte, digest string) error {
	d, err := hex.DecodeString(digest)
	if err != nil || len(d) != 32 {
		return fmt.Errorf("dataplane: bad digest %q", digest)
	}
	copy(b, d)
	return nil
}

func writeString(w io.Writer, s string) error {
	var n [2]byte
	binary.BigEndian.PutUint16(n[:], uint16(len(s)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := io.WriteString(w, s)
	return err
}

func readString(r io.Reader) (string, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	b := make([]byte, binary.BigEndian.Uint16(n[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b), nil
}

// readHeader reads a response's status and body length.
func readHeader(r io.Reader) (status byte, n uint32, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, err
	}
	n = binary.BigEndian.Uint32(h[1:])
	if n > maxBody {
		return 0, 0, errors.New("dataplane: response too large")
	}
	return h[0], n, nil
}

func header(status byte, n int) []byte {
	var h [5]byte
	h[0] = status
	binary.BigEndian.PutUint32(h[1:], uint32(n))
	return h[:]
}
