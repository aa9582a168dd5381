package etcd

import (
	"context"
	"net"
	"sync"
	"time"
)

// probeTimeout bounds each connection a probe tries: an address that takes longer is not
// answering, as far as a recovery waiting on it can tell.
const probeTimeout = 2 * time.Second

// FirstAnswer tries every one of addrs (host:port) at once and returns one at which something
// accepted a connection, or "" when none did. It asks nothing of what answers: a quorum-loss
// recovery must not go on while anything runs where a member it counts lost is known to be,
// and an etcd that refuses to talk to the operator (an unknown client certificate, a token
// lost with a restart) still answers a connection. A refused or timed-out connection is not
// an answer.
func FirstAnswer(ctx context.Context, addrs []string) string {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var (
		mu       sync.Mutex
		answered string
		wg       sync.WaitGroup
	)
	for _, addr := range addrs {
		wg.Go(func() {
			conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return
			}
			_ = conn.Close()
			mu.Lock()
			if answered == "" {
				answered = addr
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return answered
}
