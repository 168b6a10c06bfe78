package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Environment of `arena submit --api`: the gateway's URL and the
// participant's token. The token is read from the environment only,
// never a flag, so that it stays out of shell history and process lists.
const (
	EnvAPI   = "LOWBARENA_API"
	EnvToken = "LOWBARENA_TOKEN"
)

// apiClient talks to the gateway's HTTP API with a participant's token.
type apiClient struct {
	base  *url.URL
	token string
	http  *http.Client
}

func newAPIClient(raw, token string) (*apiClient, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		// The URL is not echoed: it may hold credentials.
		return nil, usageErr("--api: want the gateway's base URL, http(s)://host[:port], without credentials or a query (the token comes from %s)", EnvToken)
	}
	if token == "" {
		return nil, usageErr("submitting over the API takes a participant's token in %s (the operators print it once with `arena participant add NAME`)", EnvToken)
	}
	// Expect: 100-continue lets the gateway refuse a bundle (quota, token)
	// before a byte of it is sent. No overall timeout: an upload of a few
	// GB takes what it takes; the gateway cuts off one that stalls.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ExpectContinueTimeout = 10 * time.Second
	tr.ResponseHeaderTimeout = 10 * time.Minute
	return &apiClient{base: u, token: token, http: &http.Client{Transport: tr}}, nil
}

// apiRefusal is an answer of the gateway's other than success.
type apiRefusal struct {
	Status  int
	Code    string
	Message string
	RetryAt *time.Time
}

func (e *apiRefusal) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("the gateway answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return e.Code + ": " + e.Message
}

func (c *apiClient) do(req *http.Request, out any) error {
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: the gateway at %s does not answer: %w", ErrArenaDown, c.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read the gateway's answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct {
				Code    string     `json:"code"`
				Message string     `json:"message"`
				RetryAt *time.Time `json:"retry_at"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		return &apiRefusal{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, RetryAt: e.Error.RetryAt}
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("the gateway's answer does not decode: %w", err)
	}
	return nil
}

// submit posts a packed bundle to POST /v1/submissions and returns the
// new id.
func (c *apiClient) submit(ctx context.Context, p *packed, progress io.Writer) (string, error) {
	body := newProgressReader(p.tmp, p.sum.Size, "uploading "+filepath.Base(p.dir), progress)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base.String()+"/v1/submissions", io.NopCloser(body))
	if err != nil {
		return "", fmt.Errorf("submit: %w", err)
	}
	req.ContentLength = p.sum.Size
	req.Header.Set("Content-Type", "application/gzip")
	req.Header.Set("Lowbarena-Sha256", p.sum.SHA256)
	req.Header.Set("Expect", "100-continue")
	var out struct {
		SubmissionID string `json:"submission_id"`
	}
	if err := c.do(req, &out); err != nil {
		var r *apiRefusal
		if errors.As(err, &r) {
			return "", &exitError{code: exitFailed, err: fmt.Errorf("submission refused: %w", err)}
		}
		return "", err
	}
	return out.SubmissionID, nil
}

// record reads a submission's record.
func (c *apiClient) record(ctx context.Context, id string) (*record.Submission, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.String()+"/v1/submissions/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	var r record.Submission
	if err := c.do(req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// wait follows a record over the API (once a second) until it is no
// longer running, printing each change of its stages to progress.
func (c *apiClient) wait(ctx context.Context, id string, timeout time.Duration, progress io.Writer) (*record.Submission, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last *record.Submission
	lastLine := ""
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r, err := c.record(ctx, id)
		var refused *apiRefusal
		switch {
		case err == nil:
			last = r
			if line := stageLine(r.Stages); line != lastLine {
				fmt.Fprintf(progress, "  %s  %s\n", time.Now().Format("15:04:05"), line)
				lastLine = line
			}
			if r.Status != record.StatusRunning {
				return r, nil
			}
		case errors.As(err, &refused) && refused.Code == string(reason.SubmissionNotFound):
			// Not folded into a record yet.
		case ctx.Err() == nil:
			return nil, err
		}
		select {
		case <-ctx.Done():
			where := "no record yet"
			if last != nil {
				where = "still " + last.Status + ": " + stageLine(last.Stages)
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("submission %s: gave up waiting after %s; %s", id, timeout, where)
			}
			return nil, fmt.Errorf("submission %s: %w; %s", id, ctx.Err(), where)
		case <-tick.C:
		}
	}
}

// apiFromEnv returns the --api default.
func apiFromEnv() string { return os.Getenv(EnvAPI) }
