package workqueue_test

import (
	"context"
	"testing"
	"time"
)

// wait bounds every wait for something to arrive; it is never a speed
// assertion.
const wait = 15 * time.Second

func tctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
