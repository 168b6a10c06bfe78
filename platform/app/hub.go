package app

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/lowbarena/lowbarena/adapters/hub"
)

// Environment variables of the services that read checkpoints by
// reference (build, contract, the runner).
const (
	// EnvRefHosts lists the repository hosts participants may name.
	EnvRefHosts = "LOWBARENA_REF_HOSTS"
	// EnvRefTokens holds "host=token" pairs, comma-separated: the bearer
	// token sent to each host (private repositories).
	EnvRefTokens = "LOWBARENA_REF_TOKENS"
	// EnvRefTokensFile names a file of "host=token" lines (a mounted
	// secret), read instead of or beside EnvRefTokens.
	EnvRefTokensFile = "LOWBARENA_REF_TOKENS_FILE"
	// EnvHFToken is the Hugging Face hub's own variable: the token for
	// huggingface.co unless another setting names that host.
	EnvHFToken = "HF_TOKEN"
)

// HubFlags registers the repository client's settings on fs and returns
// a function that builds its options once the flags are parsed. Tokens
// come from the environment or a file only, never from a flag (a command
// line is visible to every user of the machine), and no error quotes
// one.
func HubFlags(fs *flag.FlagSet) func(log *slog.Logger) (hub.Options, error) {
	hosts := fs.String("ref-hosts", EnvOr(EnvRefHosts, hub.DefaultHost),
		"comma-separated repository hosts participants may name for checkpoints by reference (host or host:port; http://host allows plain http) (env "+EnvRefHosts+")")
	tokensFile := fs.String("ref-tokens-file", os.Getenv(EnvRefTokensFile),
		"file of host=token lines: the bearer token sent to each repository host (env "+EnvRefTokensFile+"; also "+EnvRefTokens+" and "+EnvHFToken+")")
	idle := fs.Duration("ref-idle-timeout", hub.DefaultIdleTimeout, "longest a repository may stay silent while it sends a file")
	return func(log *slog.Logger) (hub.Options, error) {
		o := hub.Options{IdleTimeout: *idle, Tokens: map[string]string{}}
		for _, h := range strings.Split(*hosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				o.Hosts = append(o.Hosts, h)
			}
		}
		if tok := os.Getenv(EnvHFToken); tok != "" {
			o.Tokens[hub.DefaultHost] = tok
		}
		if err := parseTokens(strings.Split(os.Getenv(EnvRefTokens), ","), EnvRefTokens, o.Tokens); err != nil {
			return o, err
		}
		if *tokensFile != "" {
			data, err := os.ReadFile(*tokensFile)
			if err != nil {
				return o, fmt.Errorf("%w: --ref-tokens-file: %w", ErrConfig, err)
			}
			if err := parseTokens(strings.Split(string(data), "\n"), *tokensFile, o.Tokens); err != nil {
				return o, err
			}
		}
		hostsWithTokens := make([]string, 0, len(o.Tokens))
		for h := range o.Tokens {
			hostsWithTokens = append(hostsWithTokens, h)
		}
		if log != nil {
			log.Info("checkpoints by reference", "hosts", strings.Join(o.Hosts, ","), "tokens_for", strings.Join(hostsWithTokens, ","))
		}
		o.Log = log
		return o, nil
	}
}

// parseTokens reads "host=token" entries (blank entries and # comments
// skipped) into tokens. A malformed entry is reported by its position,
// never by its text.
func parseTokens(entries []string, source string, tokens map[string]string) error {
	var errs []error
	for i, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" || strings.HasPrefix(e, "#") {
			continue
		}
		host, tok, ok := strings.Cut(e, "=")
		host, tok = strings.TrimSpace(host), strings.TrimSpace(tok)
		if !ok || host == "" || tok == "" || strings.ContainsAny(host, " /@") {
			errs = append(errs, fmt.Errorf("%w: %s: entry %d is not host=token", ErrConfig, source, i+1))
			continue
		}
		tokens[strings.ToLower(host)] = tok
	}
	return errors.Join(errs...)
}
