package linearizability

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Config is a workload: Clients concurrent clients, each with its own connection, doing gets,
// puts and deletes on Keys keys under Prefix.
type Config struct {
	// Endpoints every client dials; the e2e suite gives the cluster's client Service, so each
	// client's connection may land on a different member, and a member serving a stale read or
	// losing a write shows.
	Endpoints []string
	// Prefix of the keys; the workload deletes everything under it before it starts.
	Prefix string
	// Clients (default 4) and Keys (default 8): few keys, so clients contend on each.
	Clients, Keys int
	// OpTimeout bounds each operation (default 3s); a write that exceeds it is indeterminate.
	OpTimeout time.Duration
	// Pause is each client's wait between operations (default 20ms), which keeps the history,
	// and so the check, small over a long test.
	Pause time.Duration
	// KeepAliveTime and KeepAliveTimeout, when set, make each client ping its connection after
	// that long without a frame and drop it when no answer comes in time, as kube-apiserver's
	// etcd client does (30 s, 10 s). Without them a connection to a member that stopped answering
	// stays open, and is answered again if that member comes back.
	KeepAliveTime, KeepAliveTimeout time.Duration
	// TLS and DialOptions, when set, are the clients' (a cluster served over TLS, reached at
	// an address other than the name its certificate carries).
	TLS         *tls.Config
	DialOptions []grpc.DialOption
}

func (c Config) withDefaults() Config {
	if c.Clients == 0 {
		c.Clients = 4
	}
	if c.Keys == 0 {
		c.Keys = 8
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 3 * time.Second
	}
	if c.Pause == 0 {
		c.Pause = 20 * time.Millisecond
	}
	return c
}

// Workload runs from Start until Stop, recording a History.
type Workload struct {
	cfg       Config
	clients   []*clientv3.Client
	recorders []*recorder
	completed atomic.Int64
	lanes     atomic.Int64
	start     time.Time
	stop      chan struct{}
	stopped   atomic.Bool
	wg        sync.WaitGroup
}

// Start clears the prefix, so that every key starts absent as the model does, and starts the
// clients. ctx bounds the setup only.
func Start(ctx context.Context, cfg Config) (*Workload, error) {
	cfg = cfg.withDefaults()
	w := &Workload{cfg: cfg, stop: make(chan struct{})}
	for range cfg.Clients {
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
			DialKeepAliveTime: cfg.KeepAliveTime, DialKeepAliveTimeout: cfg.KeepAliveTimeout,
			TLS: cfg.TLS, DialOptions: cfg.DialOptions})
		if err != nil {
			w.closeClients()
			return nil, fmt.Errorf("etcd client: %w", err)
		}
		w.clients = append(w.clients, c)
	}
	if err := retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
		defer cancel()
		_, err := w.clients[0].Delete(ctx, cfg.Prefix+"/", clientv3.WithPrefix())
		return err
	}); err != nil {
		w.closeClients()
		return nil, fmt.Errorf("clear %s/: %w", cfg.Prefix, err)
	}
	w.start = time.Now()
	for i, c := range w.clients {
		r := newRecorder(w.start, &w.lanes, &w.completed)
		w.recorders = append(w.recorders, r)
		w.wg.Add(1)
		go w.run(c, r, i)
	}
	return w, nil
}

// Completed is how many operations have completed so far.
func (w *Workload) Completed() int { return int(w.completed.Load()) }

// SetEndpoints points every client at endpoints from now on: a member the workload dialled by
// its pod's IP may come back at another.
func (w *Workload) SetEndpoints(endpoints ...string) {
	for _, c := range w.clients {
		c.SetEndpoints(endpoints...)
	}
}

// Stop lets every client finish the operation it is in, then reads every key once more, so
// that each key's last write must be what is finally there (a lost last write is then a
// non-linearizable history, not an unseen one). ctx bounds those reads, retried until they
// succeed: a cluster that cannot serve them fails Stop.
func (w *Workload) Stop(ctx context.Context) (*History, error) {
	if w.stopped.Swap(true) {
		return nil, errors.New("workload already stopped")
	}
	close(w.stop)
	w.wg.Wait()
	defer w.closeClients()
	h := &History{}
	for _, r := range w.recorders {
		h.append(&r.History)
	}
	final := newRecorder(w.start, &w.lanes, &w.completed)
	for k := range w.cfg.Keys {
		key := w.key(k)
		err := retry(ctx, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
			defer cancel()
			call := final.now()
			resp, err := w.clients[0].Get(ctx, key)
			final.record(input{Kind: opGet, Key: key}, call, getValue(resp), err)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("final read of %s: %w", key, err)
		}
	}
	h.append(&final.History)
	return h, nil
}

// Close stops the workload without a history, for a test that ends before Stop; after Stop it
// does nothing.
func (w *Workload) Close() {
	if w.stopped.Swap(true) {
		return
	}
	close(w.stop)
	w.wg.Wait()
	w.closeClients()
}

func (w *Workload) run(c *clientv3.Client, r *recorder, client int) {
	defer w.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(client), uint64(w.start.UnixNano())))
	for seq := 0; ; seq++ {
		select {
		case <-w.stop:
			return
		default:
		}
		in := input{Key: w.key(rng.IntN(w.cfg.Keys))}
		// Reads and writes alike: reads see the state; writes, through WithPrevKV, too.
		switch n := rng.IntN(10); {
		case n < 4:
			in.Kind = opGet
		case n < 8:
			in.Kind, in.Value = opPut, fmt.Sprintf("c%d-%d", client, seq)
		default:
			in.Kind = opDelete
		}
		w.do(c, r, in)
		select {
		case <-w.stop:
			return
		case <-time.After(w.cfg.Pause):
		}
	}
}

// do runs one operation and records it. It is not cancelled by Stop: a write cut short by the
// test would be indeterminate for no reason of the cluster's.
func (w *Workload) do(c *clientv3.Client, r *recorder, in input) {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.OpTimeout)
	defer cancel()
	call := r.now()
	var value string
	var err error
	switch in.Kind {
	case opGet:
		var resp *clientv3.GetResponse
		resp, err = c.Get(ctx, in.Key)
		value = getValue(resp)
	case opPut:
		var resp *clientv3.PutResponse
		if resp, err = c.Put(ctx, in.Key, in.Value, clientv3.WithPrevKV()); err == nil && resp.PrevKv != nil {
			value = string(resp.PrevKv.Value)
		}
	case opDelete:
		var resp *clientv3.DeleteResponse
		if resp, err = c.Delete(ctx, in.Key, clientv3.WithPrevKV()); err == nil && len(resp.PrevKvs) > 0 {
			value = string(resp.PrevKvs[0].Value)
		}
	}
	r.record(in, call, value, err)
}

func (w *Workload) key(k int) string { return fmt.Sprintf("%s/k%02d", w.cfg.Prefix, k) }

func (w *Workload) closeClients() {
	for _, c := range w.clients {
		_ = c.Close()
	}
}

func getValue(resp *clientv3.GetResponse) string {
	if resp == nil || len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func retry(ctx context.Context, f func(context.Context) error) error {
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
