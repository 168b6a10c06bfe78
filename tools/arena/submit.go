package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
)

func cmdSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("submit", stderr)
	natsURL := natsFlag(fs)
	wait := fs.Bool("wait", false, "block until the submission is done or failed, then print its summary")
	timeout := fs.Duration("timeout", 30*time.Minute, "with --wait: how long to wait")
	maxUpload := fs.Int64("max-upload", defaultMaxUpload, "largest packed bundle to upload; a larger checkpoint is submitted by reference (checkpoint.json)")
	apiURL := fs.String("api", apiFromEnv(), "submit over the gateway's HTTP API at this URL, as the participant whose token is in "+EnvToken+" (env "+EnvAPI+")")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("submit takes one bundle folder (arena submit DIR [--wait])")
	}
	// The bundle is checked before the arena is asked anything.
	b, err := prepare(pos[0], *maxUpload)
	if err != nil {
		return err
	}
	defer b.close()
	if *apiURL != "" {
		return submitAPI(ctx, *apiURL, b, *wait, *timeout, stdout, stderr)
	}
	c, err := dial(ctx, *natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	id, err := submit(ctx, c, b, stderr)
	if err != nil {
		return err
	}
	if !*wait {
		fmt.Fprintf(stdout, "submitted %s as %s\n", pos[0], id)
		return nil
	}
	fmt.Fprintf(stderr, "submitted %s as %s; waiting for its stages\n", pos[0], id)
	rec, err := waitFor(ctx, c, id, *timeout, func(r *record.Submission) bool { return r.Status != record.StatusRunning }, stderr)
	if err != nil {
		return err
	}
	return printEnded(stdout, id, rec)
}

// printEnded prints a submission's record once its stages have ended,
// then "done ID", or "failed ID" and the exit status of a failed one.
func printEnded(stdout io.Writer, id string, rec *record.Submission) error {
	renderRecord(stdout, rec)
	if rec.Status == record.StatusFailed {
		fmt.Fprintf(stdout, "failed %s\n", id)
		return &exitError{code: exitFailed, err: errors.New("")}
	}
	fmt.Fprintf(stdout, "done %s\n", id)
	return nil
}

// submitAPI is `arena submit --api URL`: the packed bundle goes to the
// gateway with the participant's token, and --wait follows the record
// over the API.
func submitAPI(ctx context.Context, apiURL string, b *packed, wait bool, timeout time.Duration, stdout, stderr io.Writer) error {
	c, err := newAPIClient(apiURL, os.Getenv(EnvToken))
	if err != nil {
		return err
	}
	id, err := c.submit(ctx, b, stderr)
	if err != nil {
		return err
	}
	if !wait {
		fmt.Fprintf(stdout, "submitted %s as %s\n", b.dir, id)
		return nil
	}
	fmt.Fprintf(stderr, "submitted %s as %s; waiting for its stages\n", b.dir, id)
	rec, err := c.wait(ctx, id, timeout, stderr)
	if err != nil {
		return err
	}
	return printEnded(stdout, id, rec)
}

// newSubmissionID returns 16 hex digits, the form of the arena's ids.
func newSubmissionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// defaultMaxUpload is the build stage's default upload limit
// (unpack.DefaultMaxUploadBytes): a bundle packed larger is refused here,
// before it is uploaded, with the same advice.
const defaultMaxUpload = 2 << 30

// packed is a bundle folder checked and packed, ready to upload.
type packed struct {
	dir  string
	decl *bundle.Declaration
	// ref is checkpoint.json's reference, nil for a checkpoint in the
	// bundle itself.
	ref  *bundle.Reference
	repo modelrepo.Repo
	sum  bundle.Summary
	tmp  *os.File
}

func (p *packed) close() {
	p.tmp.Close()
	os.Remove(p.tmp.Name())
}

// prepare reads the bundle in dir (its declaration and, when it holds
// one, its checkpoint.json), refuses what the build would refuse of a
// bundle by reference, and packs it, refusing a pack over maxUpload.
func prepare(dir string, maxUpload int64) (*packed, error) {
	decl, err := bundle.ReadDeclaration(dir)
	if err != nil {
		return nil, err
	}
	p := &packed{dir: dir, decl: decl}
	if p.ref, err = bundle.ReadReference(dir); err != nil {
		return nil, err
	}
	if p.ref != nil {
		if p.repo, err = p.ref.Repo(); err != nil {
			return nil, err
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
		for _, e := range entries {
			_, listed := p.ref.File(e.Name())
			if bundle.Remote(e.Name()) || listed {
				return nil, &bundle.Error{Code: reason.BundleReferenceConflict, Message: fmt.Sprintf(
					"%s holds %s and also %s, which %s lists: a bundle by reference carries submission.json, %s and an optional patch; the checkpoint's files stay in its repository",
					dir, bundle.CheckpointFile, e.Name(), bundle.CheckpointFile, bundle.CheckpointFile)}
			}
		}
	}
	if p.tmp, err = os.CreateTemp("", "arena-bundle-*.tar.gz"); err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	if p.sum, err = bundle.Pack(dir, p.tmp); err != nil {
		p.close()
		return nil, err
	}
	if p.sum.Size > maxUpload {
		p.close()
		return nil, &bundle.Error{Code: reason.BundleUploadTooLarge, Message: fmt.Sprintf(
			"%s packs to %s; the arena takes uploads of at most %s. Submit a checkpoint this large by reference: publish it in a model repository, "+
				"write %s beside submission.json (arena reference CHECKPOINT_DIR --repository URL --revision COMMIT --out %s), and submit that folder",
			dir, bundle.HumanSize(p.sum.Size), bundle.HumanSize(maxUpload), bundle.CheckpointFile, filepath.Join(dir, bundle.CheckpointFile))}
	}
	if _, err := p.tmp.Seek(0, io.SeekStart); err != nil {
		p.close()
		return nil, fmt.Errorf("submit: %w", err)
	}
	return p, nil
}

// submitDir prepares and submits the bundle in dir.
func submitDir(ctx context.Context, c *client, dir string, progress io.Writer) (string, error) { //nolint:unused // used by arena demo (-tags embedded)
	p, err := prepare(dir, defaultMaxUpload)
	if err != nil {
		return "", err
	}
	defer p.close()
	return submit(ctx, c, p, progress)
}

// submit uploads a packed bundle to the uploads object store and
// publishes submission.received, with the reference of a checkpoint by
// reference. The event id is derived from the submission id, so a publish
// retried after a lost ack is stored once.
func submit(ctx context.Context, c *client, p *packed, progress io.Writer) (string, error) {
	dir, decl, sum, tmp := p.dir, p.decl, p.sum, p.tmp
	id := newSubmissionID()
	obj := id + ".tar.gz"
	meta := jetstream.ObjectMeta{Name: obj, Description: "bundle " + filepath.Base(dir),
		Headers: map[string][]string{"Lowbarena-Sha256": {sum.SHA256}}}
	if err := upload(ctx, c, meta, tmp, sum.Size, filepath.Base(dir), progress); err != nil {
		return "", err
	}

	b, err := bus.New(c.nc)
	if err != nil {
		return "", err
	}
	data := events.SubmissionReceivedData{
		SubmissionID: id,
		Participant:  decl.Participant,
		Agent:        decl.Agent,
		TaskID:       decl.TaskID,
		Split:        decl.Split,
		Track:        decl.Track,
		Solution:     decl.Solution,
		Bundle: events.BundleRef{Store: "jetstream", Bucket: bus.ObjectUploads, Object: obj,
			Size: sum.Size, SHA256: sum.SHA256, Files: sum.Files},
		SubmittedAt: time.Now().UTC(),
	}
	if p.ref != nil {
		data.Reference = &events.CheckpointReference{Repository: p.repo.Base.String(), Revision: p.ref.Revision, Files: len(p.ref.Files), Bytes: p.ref.Bytes()}
	}
	if _, err := bus.Emit(ctx, b, events.Source("cli"), events.Submission.Received, id, data, bus.CausedBy(id)); err != nil {
		return "", fmt.Errorf("submit: %w", err)
	}
	return id, nil
}

// uploadOutage is how long `arena submit` goes on trying an upload that
// a cluster in failover interrupted, from the first interruption.
var uploadOutage = time.Minute

// uploadPause is the pause before an interrupted upload starts again.
var uploadPause = time.Second

// upload puts the bundle in tmp (label names it in progress lines) into
// the uploads object store as meta. An upload that a cluster electing the
// uploads stream's leader interrupts starts again, for up to uploadOutage
// (bus.PutObject says why that stores it once).
func upload(ctx context.Context, c *client, meta jetstream.ObjectMeta, tmp io.ReadSeeker, size int64, label string, progress io.Writer) error {
	_, err := bus.PutObject(ctx, c.js, bus.ObjectUploads, meta, tmp, bus.PutRetry{
		Outage: uploadOutage, Pause: uploadPause,
		Wrap: func(r io.Reader) io.Reader { return newProgressReader(r, size, "uploading "+label, progress) },
		Retried: func(err error) {
			if progress != nil {
				fmt.Fprintf(progress, "  upload of %s interrupted (%v); starting it again\n", label, err)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("submit: upload bundle: %w", err)
	}
	return nil
}

// waitFor follows a record until done(record) holds, printing each change
// of its stages to progress. It fails after timeout, saying where the
// submission stands.
func waitFor(ctx context.Context, c *client, id string, timeout time.Duration, done func(*record.Submission) bool, progress io.Writer) (*record.Submission, error) {
	kv, err := c.submissions(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := kv.Watch(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("watch record %s: %w", id, err)
	}
	defer func() { _ = w.Stop() }()
	var last *record.Submission
	lastLine := ""
	for {
		select {
		case <-ctx.Done():
			where := "no record yet (is the gateway running?)"
			if last != nil {
				where = "still " + last.Status + ": " + stageLine(last.Stages)
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("submission %s: gave up waiting after %s; %s", id, timeout, where)
			}
			return nil, fmt.Errorf("submission %s: %w; %s", id, ctx.Err(), where)
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("watch record %s: the watcher stopped", id)
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // nil marks the end of the initial values
			}
			var r record.Submission
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				return nil, fmt.Errorf("decode record %s: %w", id, err)
			}
			last = &r
			if line := stageLine(r.Stages); line != lastLine {
				fmt.Fprintf(progress, "  %s  %s\n", time.Now().Format("15:04:05"), line)
				lastLine = line
			}
			if done(&r) {
				return &r, nil
			}
		}
	}
}

// progressReader reports upload progress in steps of a tenth, for bundles
// large enough that a participant would wonder.
type progressReader struct {
	r          io.Reader
	total, n   int64
	label      string
	out        io.Writer
	nextReport int64
}

func newProgressReader(r io.Reader, total int64, label string, out io.Writer) io.Reader {
	const worthReporting = 16 << 20
	if total < worthReporting || out == nil {
		return r
	}
	return &progressReader{r: r, total: total, label: label, out: out, nextReport: total / 10}
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	for p.n >= p.nextReport && p.nextReport <= p.total {
		fmt.Fprintf(p.out, "  %s: %3d%% of %s\n", p.label, p.nextReport*100/p.total, bundle.HumanSize(p.total))
		p.nextReport += p.total / 10
	}
	return n, err
}
