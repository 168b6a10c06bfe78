package main

// The CLI's side of the arena's NATS users: where a command finds the
// operator's credentials, and `arena credentials` for a cluster.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
)

// EnvData names the data folder's environment variable: `arena up`'s
// default folder, and where the other commands look for the operator's
// credentials.
const EnvData = "LOWBARENA_DATA"

// defaultData is the data folder when neither --data nor EnvData says.
const defaultData = ".data/arena"

// credentialsDir is where an arena keeps its NATS users' seeds.
func credentialsDir(data string) string { return filepath.Join(data, "credentials") }

// cliAuth finds the operator's credentials for a command that talks to a
// running arena: the environment (app.AuthFromEnv: a credentials
// file, a seed, or a user and password) wins; else the operator's seed in
// the data folder (EnvData, default .data/arena, as `arena up` keeps it),
// when it is there. It returns where it looked in the data folder.
func cliAuth() (app.NATSAuth, string) {
	dir := credentialsDir(app.EnvOr(EnvData, defaultData))
	if a := app.AuthFromEnv(); a.Set() {
		return a, dir
	}
	seed := filepath.Join(dir, access.Operator+".nk")
	if _, err := os.Stat(seed); err == nil {
		return app.NATSAuth{CredsFile: seed}, dir
	}
	return app.NATSAuth{}, dir
}

// ErrArenaAuth says the arena's NATS refused the command's credentials.
var ErrArenaAuth = errors.New("the arena refused this command's NATS credentials")

// cmdCredentials writes the NATS users' credentials for a cluster: what
// deploy/nats/auth.conf and docker-compose.yml read.
func cmdCredentials(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("credentials", stderr)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("credentials takes one folder (arena credentials DIR)")
	}
	creds, err := access.LoadOrCreate(pos[0])
	if err != nil {
		return err
	}
	files, err := creds.WriteEnvFiles(app.EnvNATSNkey)
	if err != nil {
		return err
	}
	for _, u := range access.Names() {
		fmt.Fprintf(stdout, "%-10s %s  %s\n", u, creds.Public(u), creds.SeedFile(u))
	}
	fmt.Fprintf(stdout, "wrote %d environment files beside them (nats.env: the public keys for the NATS servers; USER.env: each user's seed, 0600)\n", len(files))
	return nil
}
