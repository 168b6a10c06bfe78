package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// HTTPActor serves handler on ln until ctx is cancelled, then shuts down
// gracefully: requests in flight get up to grace to finish.
func HTTPActor(name string, ln net.Listener, handler http.Handler, grace time.Duration) Actor {
	return Actor{Name: name, Run: func(ctx context.Context) error {
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
			BaseContext: func(net.Listener) context.Context { return ctx }}
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			return fmt.Errorf("serve %s: %w", ln.Addr(), err)
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("shut down %s: %w", ln.Addr(), err)
			}
			return nil
		}
	}}
}
