package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/campaigns"
)

// runCampaign runs `arena campaign ARGS --nats url` in this process.
func runCampaign(t *testing.T, url string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), append(append([]string{"campaign"}, args...), "--nats", url), &out, &errb)
	return out.String(), err
}

// TestCampaignPushListHistory pushes the example campaigns folder, as
// `arena example DIR` writes it, into an arena's NATS: list shows its
// task at version 1 with the digest push printed, an identical push
// makes no version, a changed campaign is version 2, and history lists
// both. A folder whose campaign does not load is refused with the
// loader's reason and nothing changes.
func TestCampaignPushListHistory(t *testing.T) {
	t.Setenv(EnvData, t.TempDir())
	for _, v := range []string{app.EnvNATSCreds, app.EnvNATSNkey, app.EnvNATSUser, app.EnvNATSPassword} {
		t.Setenv(v, "")
	}
	_, srv := bustest.Bus(t)
	url := srv.ClientURL()
	dir := t.TempDir()
	_, err := examples.Write(dir)
	require.NoError(t, err)
	camps := filepath.Join(dir, examples.CampaignsDir)

	out, err := runCampaign(t, url, "push", camps, "--json")
	require.NoError(t, err)
	var pushed []campaigns.Pushed
	require.NoError(t, json.Unmarshal([]byte(out), &pushed))
	require.Len(t, pushed, 1)
	require.Equal(t, examples.TaskID, pushed[0].TaskID)
	require.True(t, pushed[0].New)
	require.Equal(t, uint64(1), pushed[0].Version)

	out, err = runCampaign(t, url, "list")
	require.NoError(t, err)
	require.Contains(t, out, "TASK")
	fields := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])
	require.Equal(t, []string{examples.TaskID, "1", pushed[0].Digest()}, fields[:3])

	out, err = runCampaign(t, url, "push", camps)
	require.NoError(t, err)
	require.Contains(t, out, "unchanged")

	meta := filepath.Join(camps, examples.TaskID, campaign.File)
	data, err := os.ReadFile(meta)
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(data, &c))
	c["name"] = "renamed for version 2"
	data, err = json.Marshal(c)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(meta, data, 0o644))
	out, err = runCampaign(t, url, "push", filepath.Join(camps, examples.TaskID))
	require.NoError(t, err)
	require.Contains(t, out, "new version")

	out, err = runCampaign(t, url, "history", examples.TaskID, "--json")
	require.NoError(t, err)
	var hist []campaigns.Entry
	require.NoError(t, json.Unmarshal([]byte(out), &hist))
	require.Len(t, hist, 2)
	require.Equal(t, pushed[0].Digest(), hist[0].Digest())
	require.Equal(t, uint64(2), hist[1].Version)
	require.Equal(t, "renamed for version 2", hist[1].Name)

	c["task_id"] = "not a task id"
	data, err = json.Marshal(c)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(meta, data, 0o644))
	_, err = runCampaign(t, url, "push", camps)
	require.ErrorIs(t, err, campaigns.ErrInvalid)
	require.ErrorContains(t, err, "task_id")
	out, err = runCampaign(t, url, "history", examples.TaskID, "--json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &hist))
	require.Len(t, hist, 2, "the refused push wrote nothing")

	_, err = runCampaign(t, url, "history", "no-such-task")
	require.ErrorIs(t, err, campaign.ErrUnknownTask)
}
