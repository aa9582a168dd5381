package etcd

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestFirstAnswerFindsAListenerAmongSilentAddresses(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	_ = closed.Close()

	if got := FirstAnswer(context.Background(), []string{refused, listener.Addr().String()}); got != listener.Addr().String() {
		t.Errorf("FirstAnswer = %q, want the listening %s", got, listener.Addr())
	}
	start := time.Now()
	if got := FirstAnswer(context.Background(), []string{refused, "name-that-does-not-resolve.invalid:2379"}); got != "" {
		t.Errorf("FirstAnswer = %q with nothing listening", got)
	}
	if took := time.Since(start); took > 2*probeTimeout {
		t.Errorf("took %s: a probe is bounded by %s", took, probeTimeout)
	}
}
