package courier

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/mattn/go-sqlite3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/zeebo/blake3"

	"provideragent/internal/backoff"
	"provideragent/internal/promreg"
	"provideragent/internal/sqlitedb"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// Component is the name under which courier migrations are recorded.
const Component = "courier"

const (
	maxSenderBytes = 256
	maxKeyBytes    = 256
	maxErrorBytes  = 1024
)

// Migrations returns the courier's embedded schema migrations.
func Migrations() ([]sqlitedb.Migration, error) {
	return sqlitedb.LoadMigrations(migrationsFS, "migrations")
}

// Clock tells the time; inject a fake one in tests.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Deps are the Courier's injected collaborators. The zero value works: no
// logging, no metrics registration, the system clock and math/rand/v2.
type Deps struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: metrics are kept but not registered
	Clock      Clock
	Rand       func() float64 // uniform in [0, 1), used for backoff jitter
}

// SendOptions are Send's optional arguments.
type SendOptions struct {
	// IdempotencyKey, when set, makes a repeated send with the same key
	// return the first receipt instead of storing the bundle again.
	// Printable ASCII, at most 256 bytes.
	IdempotencyKey string
	// Destination is the kind of forwarder that may deliver the bundle
	// (stored with the receipt). Empty means DestinationHTTP.
	Destination Destination
}

// Courier is a durable outbox over one SQLite database. Its methods are
// safe for concurrent use. Close stops its committer goroutine.
type Courier struct {
	db      *sql.DB
	cfg     Config
	log     *slog.Logger
	clock   Clock
	rnd     func() float64
	backoff backoff.Policy
	m       *metrics

	sendCh    chan *sendReq
	wake      chan struct{}
	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	flushMu sync.Mutex // one Flush at a time in this process

	// stmts are prepared once; database/sql re-prepares them on a new
	// connection and tx.StmtContext reuses the connection's copy.
	stmts struct {
		lookupKey, insertReceipt, insertBundle *sql.Stmt
	}
}

func (c *Courier) prepareStatements(ctx context.Context) error {
	for _, p := range []struct {
		dst   **sql.Stmt
		query string
	}{
		{&c.stmts.lookupKey, `SELECT ` + receiptColumns + ` FROM courier_receipts WHERE idempotency_key = ?`},
		{&c.stmts.insertReceipt, `INSERT INTO courier_receipts
			(id, bundle_hash, sender, idempotency_key, created_at, state, attempts, next_attempt_at, last_error, size, destination)
			VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, '', ?, ?)`},
		{&c.stmts.insertBundle, `INSERT INTO courier_bundles (seq, bundle) VALUES (?, ?)`},
	} {
		st, err := c.db.PrepareContext(ctx, p.query)
		if err != nil {
			c.closeStatements()
			return fmt.Errorf("prepare: %w", err)
		}
		*p.dst = st
	}
	return nil
}

func (c *Courier) closeStatements() {
	for _, st := range []*sql.Stmt{c.stmts.lookupKey, c.stmts.insertReceipt, c.stmts.insertBundle} {
		if st != nil {
			st.Close()
		}
	}
}

type sendReq struct {
	in   sendInput
	resp chan sendResp
}

type sendResp struct {
	r       Receipt
	created bool
	err     error
}

type sendInput struct {
	id     ID
	hash   string
	sender string
	key    string
	dest   Destination
	now    time.Time
	bundle []byte
}

// Open migrates the courier tables in db and starts the group committer.
// db should come from sqlitedb.Open (one connection, WAL, synchronous=FULL).
// The caller keeps ownership of db and closes it after Close.
func Open(ctx context.Context, db *sql.DB, cfg Config, deps Deps) (*Courier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open courier: %w", err)
	}
	if err := sqlitedb.MigrateEmbedded(ctx, db, Component, migrationsFS, "migrations"); err != nil {
		return nil, fmt.Errorf("open courier: %w", err)
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = systemClock{}
	}
	if deps.Rand == nil {
		deps.Rand = rand.Float64
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("open courier: %w", err)
	}
	c := &Courier{
		db:      db,
		cfg:     cfg,
		log:     deps.Logger,
		clock:   deps.Clock,
		rnd:     deps.Rand,
		backoff: cfg.Backoff(),
		m:       m,
		sendCh:  make(chan *sendReq),
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if err := c.refreshGauges(ctx); err != nil {
		return nil, fmt.Errorf("open courier: %w", err)
	}
	if err := c.prepareStatements(ctx); err != nil {
		return nil, fmt.Errorf("open courier: %w", err)
	}
	go c.commitLoop()
	return c, nil
}

// Close stops the group committer after the batch in progress and closes
// the prepared statements. Sends that have not been accepted yet fail with
// ErrClosed; SendTx must not be called after Close. It does not close the
// db.
func (c *Courier) Close() error {
	c.closeOnce.Do(func() {
		close(c.quit)
		<-c.done
		c.closeStatements()
	})
	<-c.done
	return nil
}

// Config returns the validated configuration.
func (c *Courier) Config() Config { return c.cfg }

// Send stores bundle durably (committed with synchronous=FULL) and returns
// its receipt. Concurrent sends share one transaction. With an idempotency
// key already used, it returns the first receipt (and ErrIdempotencyConflict
// if that receipt's bundle differs). If Send returns a context error the
// bundle may or may not have been stored; retry with an idempotency key.
func (c *Courier) Send(ctx context.Context, bundle []byte, sender string, opts SendOptions) (Receipt, error) {
	in, err := c.prepare(bundle, sender, opts)
	if err != nil {
		return Receipt{}, fmt.Errorf("courier send: %w", err)
	}
	in.bundle = bytes.Clone(bundle)
	req := &sendReq{in: in, resp: make(chan sendResp, 1)}
	select {
	case c.sendCh <- req:
	case <-ctx.Done():
		return Receipt{}, fmt.Errorf("courier send: %w", ctx.Err())
	case <-c.quit:
		return Receipt{}, fmt.Errorf("courier send: %w", ErrClosed)
	}
	select {
	case r := <-req.resp:
		if r.err != nil {
			return r.r, fmt.Errorf("courier send: %w", r.err)
		}
		if r.created {
			c.notify()
		}
		return r.r, nil
	case <-ctx.Done():
		return Receipt{}, fmt.Errorf("courier send (may have been stored): %w", ctx.Err())
	}
}

// SendTx stores bundle inside the caller's transaction, so that it becomes
// durable exactly when (and only if) tx commits. tx must belong to the same
// database. It does not touch any other connection, so it works with the
// single-connection database; do not call Send while holding tx (Send waits
// for the same connection).
func (c *Courier) SendTx(ctx context.Context, tx *sql.Tx, bundle []byte, sender string, opts SendOptions) (Receipt, error) {
	in, err := c.prepare(bundle, sender, opts)
	if err != nil {
		return Receipt{}, fmt.Errorf("courier send in tx: %w", err)
	}
	in.bundle = bundle
	r, created, err := c.insertReceipt(ctx, tx, in)
	if err != nil {
		return r, fmt.Errorf("courier send in tx: %w", err)
	}
	if created {
		// Run cannot read before tx ends: the database has one connection.
		c.notify()
	}
	return r, nil
}

// notify wakes Run without blocking.
func (c *Courier) notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Courier) prepare(bundle []byte, sender string, opts SendOptions) (sendInput, error) {
	if len(bundle) > c.cfg.MaxBundleBytes {
		return sendInput{}, fmt.Errorf("bundle is %d bytes, limit %d: %w", len(bundle), c.cfg.MaxBundleBytes, ErrBundleTooLarge)
	}
	if err := validateToken("sender", sender, maxSenderBytes, false); err != nil {
		return sendInput{}, err
	}
	if err := validateToken("idempotency key", opts.IdempotencyKey, maxKeyBytes, true); err != nil {
		return sendInput{}, err
	}
	dest := opts.Destination
	if dest == "" {
		dest = DestinationHTTP
	}
	if _, err := ParseDestination(string(dest)); err != nil {
		return sendInput{}, err
	}
	id, err := NewID()
	if err != nil {
		return sendInput{}, err
	}
	return sendInput{
		id:     id,
		hash:   HashBundle(bundle),
		sender: sender,
		key:    opts.IdempotencyKey,
		dest:   dest,
		now:    c.clock.Now(),
	}, nil
}

// validateToken accepts visible ASCII (it travels in HTTP headers).
func validateToken(what, s string, limit int, optional bool) error {
	if s == "" {
		if optional {
			return nil
		}
		return fmt.Errorf("%s is empty: %w", what, ErrInvalidSend)
	}
	if len(s) > limit {
		return fmt.Errorf("%s is %d bytes, limit %d: %w", what, len(s), limit, ErrInvalidSend)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return fmt.Errorf("%s %q: byte %d is not visible ASCII: %w", what, truncate(s, 40), i, ErrInvalidSend)
		}
	}
	return nil
}

// HashBundle is the BLAKE3-256 hex digest used as a receipt's bundle hash.
func HashBundle(bundle []byte) string {
	sum := blake3.Sum256(bundle)
	return fmt.Sprintf("%x", sum[:])
}

// commitLoop is the group committer: it takes one waiting send, then every
// send already waiting (up to SendBatch), and stores them in one transaction.
func (c *Courier) commitLoop() {
	defer close(c.done)
	batch := make([]*sendReq, 0, c.cfg.SendBatch)
	for {
		select {
		case <-c.quit:
			return
		case r := <-c.sendCh:
			batch = append(batch[:0], r)
		}
	drain:
		for len(batch) < c.cfg.SendBatch {
			select {
			case r := <-c.sendCh:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		c.commitBatch(batch)
	}
}

func (c *Courier) commitBatch(batch []*sendReq) {
	// The committer outlives any one caller's ctx: a send accepted into a
	// batch is either committed with it or fails with it.
	ctx := context.Background()
	resps := make([]sendResp, len(batch))
	created := 0
	err := sqlitedb.InTx(ctx, c.db, func(tx *sql.Tx) error {
		created = 0
		for i, req := range batch {
			r, ok, err := c.insertReceipt(ctx, tx, req.in)
			if err != nil && !errors.Is(err, ErrIdempotencyConflict) && !isConstraint(err) {
				return err // the whole batch fails
			}
			resps[i] = sendResp{r: r, created: ok, err: err}
			if ok {
				created++
			}
		}
		return nil
	})
	if err != nil {
		c.log.Error("courier group commit failed", "sends", len(batch), "err", err)
		for i := range resps {
			resps[i] = sendResp{err: fmt.Errorf("commit: %w", err)}
		}
		created = 0
	}
	c.m.pending.Add(float64(created))
	for i, req := range batch {
		req.resp <- resps[i]
	}
}

// isConstraint reports a constraint violation (a statement-level failure
// that leaves the rest of the transaction intact).
func isConstraint(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrConstraint
}

const receiptColumns = `id, bundle_hash, sender, COALESCE(idempotency_key, ''), created_at, state, attempts,
	next_attempt_at, last_error, failed_at, acknowledged_at, size, destination`

type scanner interface{ Scan(dest ...any) error }

// scanReceipt reads receiptColumns, then any extra columns into extra.
func scanReceipt(s scanner, extra ...any) (Receipt, error) {
	var (
		r             Receipt
		id            int64
		created, next int64
		failed, acked sql.NullInt64
		state, to     string
	)
	dest := append([]any{&id, &r.BundleHash, &r.Sender, &r.IdempotencyKey, &created, &state, &r.Attempts,
		&next, &r.LastError, &failed, &acked, &r.Size, &to}, extra...)
	if err := s.Scan(dest...); err != nil {
		return Receipt{}, err
	}
	r.ID = ID(uint64(id))
	r.State = State(state)
	r.Destination = Destination(to)
	r.CreatedAt = fromMillis(created)
	r.NextAttemptAt = fromMillis(next)
	if failed.Valid {
		r.FailedAt = fromMillis(failed.Int64)
	}
	if acked.Valid {
		r.AcknowledgedAt = fromMillis(acked.Int64)
	}
	return r, nil
}

func millis(t time.Time) int64        { return t.UnixMilli() }
func fromMillis(ms int64) time.Time   { return time.UnixMilli(ms).UTC() }
func dbID(id ID) int64                { return int64(uint64(id)) }
func nullKey(k string) sql.NullString { return sql.NullString{String: k, Valid: k != ""} }

// insertReceipt stores one receipt in tx, or returns the receipt already
// stored under the same idempotency key (created = false).
func (c *Courier) insertReceipt(ctx context.Context, tx *sql.Tx, in sendInput) (Receipt, bool, error) {
	if in.key != "" {
		row := tx.StmtContext(ctx, c.stmts.lookupKey).QueryRowContext(ctx, in.key)
		r, err := scanReceipt(row)
		switch {
		case err == nil:
			if r.BundleHash != in.hash {
				return r, false, fmt.Errorf("key %q is receipt %s: %w", in.key, r.ID, ErrIdempotencyConflict)
			}
			if r.Destination != in.dest {
				return r, false, fmt.Errorf("key %q is receipt %s for destination %s, not %s: %w",
					in.key, r.ID, r.Destination, in.dest, ErrIdempotencyConflict)
			}
			return r, false, nil
		case !errors.Is(err, sql.ErrNoRows):
			return Receipt{}, false, fmt.Errorf("look up idempotency key: %w", err)
		}
	}
	now := millis(in.now)
	if in.bundle == nil {
		in.bundle = []byte{} // NULL is not a bundle
	}
	res, err := tx.StmtContext(ctx, c.stmts.insertReceipt).ExecContext(ctx,
		dbID(in.id), in.hash, in.sender, nullKey(in.key), now, now, len(in.bundle), string(in.dest))
	if err != nil {
		return Receipt{}, false, fmt.Errorf("insert receipt: %w", err)
	}
	seq, err := res.LastInsertId()
	if err == nil {
		_, err = tx.StmtContext(ctx, c.stmts.insertBundle).ExecContext(ctx, seq, in.bundle)
	}
	if err != nil {
		// Never leave a receipt without its bundle in a committed batch.
		if _, derr := tx.ExecContext(ctx, `DELETE FROM courier_receipts WHERE id = ?`, dbID(in.id)); derr != nil {
			return Receipt{}, false, fmt.Errorf("insert bundle: %w (and remove receipt: %v)", err, derr)
		}
		return Receipt{}, false, fmt.Errorf("insert bundle: %w", err)
	}
	return Receipt{
		ID:             in.id,
		BundleHash:     in.hash,
		Sender:         in.sender,
		IdempotencyKey: in.key,
		Destination:    in.dest,
		CreatedAt:      fromMillis(now),
		State:          StatePending,
		NextAttemptAt:  fromMillis(now),
		Size:           len(in.bundle),
	}, true, nil
}

// Stats counts receipts per state.
type Stats struct {
	Pending, Acknowledged, Dead int
}

// Stats counts the receipts in each state.
func (c *Courier) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	for _, q := range []struct {
		st State
		n  *int
	}{{StatePending, &s.Pending}, {StateAcknowledged, &s.Acknowledged}, {StateDead, &s.Dead}} {
		n, err := c.count(ctx, q.st)
		if err != nil {
			return Stats{}, fmt.Errorf("courier stats: %w", err)
		}
		*q.n = n
	}
	return s, nil
}

// count counts one state from its partial index (the literal lets SQLite
// use it).
func (c *Courier) count(ctx context.Context, st State) (int, error) {
	if !st.Valid() {
		return 0, fmt.Errorf("count state %q: %w", st, ErrInvalidSend)
	}
	var n int
	err := c.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM courier_receipts WHERE state = '`+string(st)+`'`).Scan(&n)
	return n, err
}

// refreshGauges sets courier_pending and courier_dead_letter_queue_size
// from the database.
func (c *Courier) refreshGauges(ctx context.Context) error {
	pending, err := c.count(ctx, StatePending)
	if err != nil {
		return fmt.Errorf("refresh gauges: %w", err)
	}
	dead, err := c.count(ctx, StateDead)
	if err != nil {
		return fmt.Errorf("refresh gauges: %w", err)
	}
	c.m.pending.Set(float64(pending))
	c.m.dlqSize.Set(float64(dead))
	return nil
}

type metrics struct {
	flushAttempts prometheus.Counter
	flushFailures prometheus.Counter
	receipts      *prometheus.CounterVec
	retries       prometheus.Counter
	dlqSize       prometheus.Gauge
	pending       prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f, registered := promreg.Factory(reg)
	m := &metrics{
		flushAttempts: f.NewCounter(prometheus.CounterOpts{
			Name: "courier_flush_attempt_total", Help: "Deliveries attempted by Flush."}),
		flushFailures: f.NewCounter(prometheus.CounterOpts{
			Name: "courier_flush_failure_total", Help: "Deliveries that failed (any class)."}),
		receipts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "courier_receipts_total", Help: "Delivery outcomes by status (acknowledged or error class) and success."},
			[]string{"status", "success"}),
		retries: f.NewCounter(prometheus.CounterOpts{
			Name: "courier_receipt_retries_total", Help: "Receipts rescheduled for another attempt."}),
		dlqSize: f.NewGauge(prometheus.GaugeOpts{
			Name: "courier_dead_letter_queue_size", Help: "Receipts in the dead-letter queue."}),
		pending: f.NewGauge(prometheus.GaugeOpts{
			Name: "courier_pending", Help: "Receipts waiting for delivery."}),
	}
	// Every status/success pair from the start, at 0.
	m.receipts.WithLabelValues(string(StateAcknowledged), "true")
	for _, class := range []ErrorClass{ClassClient, ClassRateLimited, ClassServer, ClassTransport} {
		m.receipts.WithLabelValues(string(class), "false")
	}
	if err := registered(); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return m, nil
}

// sanitizeError makes an error message safe and short for storage.
func sanitizeError(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > maxErrorBytes {
		s = s[:maxErrorBytes]
	}
	return string(bytes.ToValidUTF8([]byte(s), []byte("?")))
}
