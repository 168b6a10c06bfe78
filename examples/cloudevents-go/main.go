// Command cloudevents-go submits a bundle to a running lowbarena and
// follows its events with the official CloudEvents Go SDK alone, as a
// client outside the arena would: the bundle goes to the object store
// bucket "uploads", submission.received goes to
// arena.submission.received.<id>, and every event about the submission is
// read back from the ARENA stream until its contract stage ends.
//
//	--mode binary      the SDK's JetStream binding (attributes in ce-* headers)
//	--mode structured  the SDK's plain NATS binding (application/cloudevents+json)
//
// The arena answers in the mode it was asked in, so the structured client
// reads the events that follow its submission as structured events too.
// It prints one line per event and exits 0 once the contract is kept, 1
// when a stage fails or nothing ends in time.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats/v2"
	cejsm "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "the arena's NATS")
	nkey := flag.String("nkey", os.Getenv("NATS_NKEY"), "the operator's nkey seed file (DATA/credentials/operator.nk of `arena up`; env NATS_NKEY, as the nats CLI)")
	dir := flag.String("bundle", "", "the bundle folder (submission.json, config.json, *.safetensors, ...)")
	mode := flag.String("mode", "binary", "binary (JetStream binding) or structured (plain NATS binding)")
	wait := flag.Duration("wait", 2*time.Minute, "how long to wait for the contract stage")
	flag.Parse()
	if err := run(*url, *nkey, *dir, *mode, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "cloudevents-go:", err)
		os.Exit(1)
	}
}

func run(url, nkey, dir, mode string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// The arena's NATS lets in its users only; submitting over NATS is
	// the operator's (participants go through the gateway's HTTP API).
	var opts []nats.Option
	if nkey != "" {
		opt, err := nats.NkeyOptionFromSeed(nkey)
		if err != nil {
			return err
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()

	// The data of submission.received copies these fields of submission.json.
	var decl struct {
		TaskID      string          `json:"task_id"`
		Split       string          `json:"split"`
		Participant string          `json:"participant"`
		Agent       string          `json:"agent,omitempty"`
		Track       string          `json:"track"`
		Solution    json.RawMessage `json:"solution"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "submission.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &decl); err != nil {
		return fmt.Errorf("submission.json: %w", err)
	}

	// 1. The bundle as a gzip'd tar in the bucket "uploads".
	id := newID()
	archive, files, err := pack(dir)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	uploads, err := js.ObjectStore(ctx, "uploads")
	if err != nil {
		return err
	}
	if _, err := uploads.PutBytes(ctx, id+".tar.gz", archive); err != nil {
		return err
	}
	sum := sha256.Sum256(archive)

	// 2. Listen for every event about the submission before announcing it.
	events, err := listen(ctx, nc, mode, "arena.*.*."+id)
	if err != nil {
		return err
	}

	// 3. submission.received: no subject attribute is needed, the arena
	// takes it from submission_id.
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetSource("/participants/" + decl.Participant)
	e.SetType("dev.lowbarena.submission.received.v1")
	e.SetTime(time.Now())
	if err := e.SetData(cloudevents.ApplicationJSON, map[string]any{
		"submission_id": id, "participant": decl.Participant, "agent": decl.Agent, "task_id": decl.TaskID,
		"split": decl.Split, "track": decl.Track, "solution": decl.Solution, "submitted_at": time.Now().UTC(),
		"bundle": map[string]any{"store": "jetstream", "bucket": "uploads", "object": id + ".tar.gz",
			"size": len(archive), "sha256": hex.EncodeToString(sum[:]), "files": files},
	}); err != nil {
		return err
	}
	subject := "arena.submission.received." + id
	var sender cloudevents.Client
	if mode == "structured" {
		p, err := cenats.NewSenderFromConn(nc, subject) // structured mode only
		if err != nil {
			return err
		}
		sender, err = cloudevents.NewClient(p)
		if err != nil {
			return err
		}
	} else {
		p, err := cejsm.NewSenderFromConn(nc, "ARENA", subject, nil) // binary mode
		if err != nil {
			return err
		}
		sender, err = cloudevents.NewClient(p)
		if err != nil {
			return err
		}
	}
	if res := sender.Send(ctx, e); cloudevents.IsUndelivered(res) {
		return fmt.Errorf("send: %w", res)
	}
	fmt.Printf("submitted %s in %s mode\n", id, mode)

	// 4. Follow it until the contract stage ends.
	for {
		select {
		case ev := <-events:
			fmt.Printf("%s %s %s\n", ev.Type(), ev.Subject(), ev.DataSchema())
			switch {
			case ev.Type() == "dev.lowbarena.contract.completed.v1":
				return nil
			case strings.HasSuffix(ev.Type(), ".failed.v1"):
				return fmt.Errorf("%s: %s", ev.Type(), ev.Data())
			}
		case <-ctx.Done():
			return fmt.Errorf("no contract outcome for %s within the wait", id)
		}
	}
}

// listen receives the events on subject with the SDK: in binary mode from
// the ARENA stream through the JetStream binding (all of them, from the
// first), in structured mode live through the plain NATS binding.
func listen(ctx context.Context, nc *nats.Conn, mode, subject string) (<-chan cloudevents.Event, error) {
	var c cloudevents.Client
	var err error
	if mode == "structured" {
		p, perr := cenats.NewConsumerFromConn(nc, subject)
		if perr != nil {
			return nil, perr
		}
		c, err = cloudevents.NewClient(p)
	} else {
		p, perr := cejsm.NewConsumerFromConn(nc, "ARENA", subject, nil, []nats.SubOpt{nats.DeliverAll()})
		if perr != nil {
			return nil, perr
		}
		c, err = cloudevents.NewClient(p)
	}
	if err != nil {
		return nil, err
	}
	out := make(chan cloudevents.Event, 64)
	go func() {
		_ = c.StartReceiver(ctx, func(ev cloudevents.Event) { out <- ev })
	}()
	// Give the subscription a moment to reach the server before sending.
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond)
	return out, nil
}

// pack writes the folder as a gzip'd tar and counts its files.
func pack(dir string) ([]byte, int, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		files++
		_, err = tw.Write(body)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if err := tw.Close(); err != nil {
		return nil, 0, err
	}
	if err := zw.Close(); err != nil {
		return nil, 0, err
	}
	return buf.Bytes(), files, nil
}

// newID returns 16 hex digits, the form of the arena's submission ids.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
