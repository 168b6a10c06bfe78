package service

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lowbarena/lowbarena/services/domain/campaign"
)

// This file is the same in services/efficiency/service and
// services/quality/service: the check belongs with the campaign (as
// campaign.(*Campaign).CheckReference in services/domain/campaign), where
// every stage that stores the BF16 reference (efficiency, quality, round)
// can call one copy of it. Until it moves there, the two copies must stay
// identical.

// errNoReference is a campaign whose BF16 reference folder is missing or
// holds no weights (no *.safetensors).
var errNoReference = errors.New("no BF16 reference checkpoint")

// checkReference reports, wrapping errNoReference, a campaign whose BF16
// reference folder (ReferenceDir) is missing or holds no *.safetensors;
// its message is a sentence for the participant and the operator. It only
// reads the folder: a stage calls it before it stores anything, and
// refuses with campaign_no_reference when it fails.
func checkReference(c *campaign.Campaign) error {
	dir := c.ReferenceDir()
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("campaign %s has %w: the folder %s does not exist", c.TaskID, errNoReference, dir)
	}
	// Glob fails only on a malformed pattern, which this one is not.
	w, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(w) == 0 {
		return fmt.Errorf("campaign %s has %w: no *.safetensors in %s", c.TaskID, errNoReference, dir)
	}
	return nil
}
