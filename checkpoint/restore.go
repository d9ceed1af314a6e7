package checkpoint

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"golang.org/x/sys/unix"

	"provideragent/heartbeat"
	"provideragent/lease"
	"provideragent/relay"
	"provideragent/uploader"
)

// RecordQuerier reads stored events from the lease's relays: what every
// relay served before its EOSE, and how many relays answered completely
// (the agent's RelayPool).
type RecordQuerier interface {
	Query(ctx context.Context, f nostr.Filter) ([]relay.Received, int)
}

// RecordVerifier checks an event's signature, decodes it and applies the
// signer rules that need lease state (a checkpoint record must come from a
// lease member): the agent's heartbeat.Ingestor.
type RecordVerifier interface {
	Ingest(ctx context.Context, now time.Time, ev *nostr.Event) (heartbeat.Ingested, error)
}

// BlobFetcher downloads Blossom blobs and verifies their hashes.
type BlobFetcher interface {
	// Blob gets blob sha from the first of servers that returns it
	// intact (see uploader.FetchBlob) and tells bad of every server that
	// served wrong bytes.
	Blob(ctx context.Context, sha string, size, maxBytes int64, servers []string, bad uploader.BadCopy) ([]byte, error)
}

// HTTPBlobs fetches blobs with uploader.FetchBlob.
type HTTPBlobs struct {
	// Client is the HTTP client; nil means http.DefaultClient.
	Client *http.Client
}

var _ BlobFetcher = HTTPBlobs{}

// Blob implements BlobFetcher.
func (b HTTPBlobs) Blob(ctx context.Context, sha string, size, maxBytes int64, servers []string, bad uploader.BadCopy) ([]byte, error) {
	return uploader.FetchBlob(ctx, b.Client, sha, size, maxBytes, servers, bad)
}

// BadCopy is a server that served wrong bytes for a blob of a workload's
// checkpoint (Reason hash_mismatch, truncated_tile or bad_manifest),
// whether or not another server then served the blob intact: the restore
// goes on, but the server's copy is bad.
type BadCopy struct {
	Workload, Server, Blob, Reason string
	Err                            error
}

// Why a checkpoint is refused while it is fetched (besides
// lease.SelectCheckpoints' reasons and the Ingestor's, such as
// wrong_signer, bad_sig and decode).
const (
	RefuseHashMismatch  = "hash_mismatch"
	RefuseTruncatedTile = "truncated_tile"
	RefuseBadManifest   = "bad_manifest"
	RefuseTooLarge      = "too_large"
	RefuseBadHint       = "bad_hint"
	// RefuseUndecryptable: a manifest or tile whose hash checked out does
	// not open with the grant's checkpoint key (ErrUndecryptable): sealed
	// with another grant's key, or not sealed.
	RefuseUndecryptable = "undecryptable"
)

// Dir is where a run finds its checkpoint, and who it runs as.
type Dir struct {
	Path     string
	UID, GID int
}

// RestoreRequest is one restore attempt: the machine's ask and what the
// agent knows of the lease.
type RestoreRequest struct {
	lease.RestoreCheckpoint
	// Members are the lease's members (hex keys): the only possible
	// authors of its checkpoint records.
	Members []string
	// Servers are tried after a record's own servers: the policy's, then
	// the provider's configured ones.
	Servers []string
	// Dir is the new run's checkpoint directory.
	Dir Dir
	// Key is the grant's checkpoint key (nil: the grant has none, and its
	// checkpoints are plaintext). With a key, every record's and hint's
	// manifest must open with it; the grant's own state_uri (Seed) may
	// also name a plaintext checkpoint, which its issuer stored.
	Key *Key
}

// Restorer fetches the newest usable checkpoint of a workload and places
// it in the checkpoint directory of the run about to start. It never
// imports the agent: the relays, the verifying ingest and the Blossom
// downloads are interfaces.
type Restorer struct {
	Relays RecordQuerier
	Verify RecordVerifier
	Blobs  BlobFetcher
	// Self is this provider's hex public key.
	Self string
	// MaxSkew is the lease's clock bound (lease.SelectCheckpoints).
	MaxSkew time.Duration
	// Quorum is how many relays must answer a query (N-M+1, so that at
	// least one of them holds any record that reached M relays).
	Quorum int
	// QueryTimeout bounds one relay query.
	QueryTimeout time.Duration
	// MaxBytes bounds a restored checkpoint (<= 0: no bound).
	MaxBytes int64
	// Retry is the pause between two tries within one attempt when the
	// relays or the servers could not be reached (default 1 s).
	Retry time.Duration
	// OnBadCopy, when set, hears of every server that served wrong bytes
	// (each is also a WARN naming the server, the blob and the workload).
	OnBadCopy func(BadCopy)
	Now       func() time.Time
	Logger    *slog.Logger
}

// RestoreOutcome is what a restore attempt did.
type RestoreOutcome struct {
	// Result is the machine's input.
	Result lease.RestoreResult
	// Record is the record whose checkpoint was placed (nil when none was,
	// or when a hint or seed without a record was).
	Record *heartbeat.CheckpointRecord
	// StateURI is the BUD-10 URI of the manifest placed ("" when none).
	StateURI string
	// Placed identifies the file placed (zero when none).
	Placed FileID
	// Blobs are the placed checkpoint's manifest and tiles as stored
	// (Publisher.Protect keeps them on the servers).
	Blobs []string
	// Refused lists the records and blobs refused, with their reasons.
	Refused []lease.CheckpointRefusal
}

// errUnavailable marks a failure worth retrying within the attempt: too
// few relays answered, or no server returned a blob.
var errUnavailable = errors.New("unavailable")

// candidate is one thing to try to restore: a record, or a state URI.
type candidate struct {
	rec   *heartbeat.CheckpointRecord // nil for a hint or seed
	ref   uploader.BlossomRef
	what  string // "epoch 3 seq 41 (record 1a2b...)", "the revocation's state_uri"
	label string // event id or "hint"/"seed", for refusals
}

// Restore runs one attempt of req within ctx (the caller bounds it by the
// attempt's timeout), retrying while relays or servers are unreachable.
// It never leaves a partial file named FileName: the checkpoint is
// written to a temporary name, verified, synced, given to the workload's
// user and renamed into place, and only if ctx has not ended.
func (r *Restorer) Restore(ctx context.Context, req RestoreRequest) RestoreOutcome {
	base := lease.RestoreResult{Workload: req.ID, Epoch: req.Epoch, Attempt: req.Attempt}
	retry := r.Retry
	if retry <= 0 {
		retry = time.Second
	}
	var whole error // the newest failed try that the attempt's end did not cut short
	for try := 1; ; try++ {
		out, err := r.try(ctx, req)
		out.Result.Workload, out.Result.Epoch, out.Result.Attempt = base.Workload, base.Epoch, base.Attempt
		if err == nil || !errors.Is(err, errUnavailable) {
			if err != nil {
				out.Result.OK, out.Result.Fresh = false, false
				out.Result.Reason = err.Error()
			}
			return out
		}
		if ctx.Err() == nil || whole == nil {
			whole = err
		}
		r.logger().Warn("checkpoint restore: retrying", "workload", req.ID, "epoch", req.Epoch, "try", try, "err", err)
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			// A try the attempt's end cut short counts fewer relays than
			// answered before: the reason is the last whole try's.
			out.Result.OK, out.Result.Fresh = false, false
			out.Result.Reason = fmt.Sprintf("%v (after %d tries: %v)", whole, try, context.Cause(ctx))
			return out
		case <-t.C:
		}
	}
}

func (r *Restorer) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}

func (r *Restorer) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

// try is one pass: query, select, fetch and place.
func (r *Restorer) try(ctx context.Context, req RestoreRequest) (RestoreOutcome, error) {
	var out RestoreOutcome
	recs, err := r.query(ctx, req, &out)
	if errors.Is(err, errUnavailable) && req.Hint != "" {
		return r.hintWithoutRecords(ctx, req, out, err)
	}
	if err != nil {
		return out, err
	}
	cands := make([]lease.CheckpointCandidate, 0, len(recs))
	for _, rec := range recs {
		cands = append(cands, lease.CheckpointCandidate{
			EventID: rec.EventID, Signer: rec.Signer, Workload: rec.WorkloadID, Epoch: rec.Epoch, Seq: rec.Seq,
			CreatedAt: rec.CreatedAt, GrantAt: rec.GrantAt, Ref: rec,
		})
	}
	usable, refused := lease.SelectCheckpoints(req.RestoreCheckpoint, r.Self, r.MaxSkew, cands)
	out.Refused = append(out.Refused, refused...)

	// What to try, in order: the revocation's hint (as the record naming
	// it when there is one), the usable records newest first, the grant's
	// seed when no record of this grant survived.
	var order []candidate
	hinted := ""
	if req.Hint != "" {
		ref, err := uploader.ParseBlossomURI(req.Hint)
		if err != nil {
			out.Refused = append(out.Refused, lease.CheckpointRefusal{EventID: "hint", Reason: RefuseBadHint, Detail: err.Error()})
		} else {
			for _, u := range usable {
				if rec := u.Ref.(*heartbeat.CheckpointRecord); rec.Manifest == ref.SHA256 {
					order = append(order, recordCandidate(rec))
					hinted = rec.EventID
					break
				}
			}
			if hinted == "" {
				if why := r.hintRefusal(req, ref); why != "" {
					out.Refused = append(out.Refused, lease.CheckpointRefusal{EventID: "hint", Reason: RefuseBadHint, Detail: why})
				} else {
					order = append(order, candidate{ref: ref, what: "the revocation's state_uri " + short(ref.SHA256), label: "hint"})
				}
			}
		}
	}
	if ev := req.Evidence; ev.Ahead(usable, refused) && !strings.Contains(req.Hint, ev.Manifest) {
		// The holder's heartbeats named a newer checkpoint than any
		// record the relays served (they lost it, or never had it): its
		// manifest is on the lease's servers, named by its hash.
		order = append(order, candidate{ref: uploader.BlossomRef{SHA256: ev.Manifest},
			what:  fmt.Sprintf("epoch %d seq %d, named by its holder's heartbeats (manifest %s)", ev.Epoch, ev.Seq, short(ev.Manifest)),
			label: "evidence"})
	}
	fresh := 0
	for _, u := range usable {
		rec := u.Ref.(*heartbeat.CheckpointRecord)
		switch {
		case rec.EventID == hinted:
		case rec.Fresh:
			fresh++ // a holder that started from nothing: nothing to fetch
		default:
			order = append(order, recordCandidate(rec))
		}
	}
	if len(usable) == 0 && req.Seed != "" && !refusedFor(out.Refused, lease.RefuseBehindUnknownEpoch) {
		// (Not when a required restore refused older records as behind a
		// newer epoch: the grant's seed is older still.)
		if ref, err := uploader.ParseBlossomURI(req.Seed); err != nil {
			out.Refused = append(out.Refused, lease.CheckpointRefusal{EventID: "seed", Reason: RefuseBadHint, Detail: err.Error()})
		} else {
			order = append(order, candidate{ref: ref, what: "the grant's state_uri " + short(ref.SHA256), label: "seed"})
		}
	}
	if len(order) == 0 {
		switch {
		case fresh > 0:
			out.Result.Fresh = true
			out.Result.Reason = "the previous holder started without a checkpoint and published none"
			if len(out.Refused) > 0 {
				out.Result.Reason += "; refused " + refusals(out.Refused)
			}
			return out, nil
		case !blocking(out.Refused):
			out.Result.Fresh = true
			out.Result.Reason = "no checkpoint was ever published"
			if refusedFor(out.Refused, lease.RefuseOtherGrant) {
				out.Result.Reason += " for this grant (an earlier grant's records are not restored: a re-grant starts its state anew, under a checkpoint key of its own)"
			}
			if len(out.Refused) > 0 {
				out.Result.Reason += "; refused " + refusals(out.Refused)
			}
			return out, nil
		}
		return out, fmt.Errorf("no usable checkpoint: refused %s", refusals(out.Refused))
	}

	var skipped []string
	unavailable := false
	for _, c := range order {
		err := r.fetchAndPlace(ctx, req, c, &out)
		if err == nil {
			out.Result.OK = true
			out.Result.From = c.what
			if len(skipped) > 0 {
				out.Result.From += "; skipped " + strings.Join(skipped, "; ")
			}
			if c.rec != nil {
				out.Record = c.rec
			}
			return out, nil
		}
		if ctx.Err() != nil {
			return out, fmt.Errorf("restore %s: %w", c.what, context.Cause(ctx))
		}
		reason := blobRefusal(err)
		if reason == "" {
			unavailable = true
			skipped = append(skipped, fmt.Sprintf("%s unavailable: %v", c.what, err))
			continue
		}
		out.Refused = append(out.Refused, lease.CheckpointRefusal{EventID: c.label, Reason: reason, Detail: err.Error()})
		skipped = append(skipped, fmt.Sprintf("%s refused (%s: %v)", c.what, reason, err))
	}
	err = fmt.Errorf("no checkpoint could be restored: %s", strings.Join(skipped, "; "))
	if unavailable {
		err = fmt.Errorf("%w: %w", err, errUnavailable)
	}
	return out, err
}

// PlaceURI fetches the checkpoint whose manifest the BUD-10 uri names (its
// xs servers, then servers), verifies every hash and places it in dir as
// Restore does; for a checkpoint this provider published or restored
// itself (a restarted run), which needs no record.
func (r *Restorer) PlaceURI(ctx context.Context, workload, uri string, key *Key, servers []string, dir Dir) (FileID, error) {
	ref, err := uploader.ParseBlossomURI(uri)
	if err != nil {
		return FileID{}, err
	}
	var out RestoreOutcome
	req := RestoreRequest{RestoreCheckpoint: lease.RestoreCheckpoint{ID: workload}, Servers: servers, Dir: dir, Key: key}
	if err := r.fetchAndPlace(ctx, req, candidate{ref: ref, what: "state_uri " + short(ref.SHA256), label: "uri"}, &out); err != nil {
		return FileID{}, err
	}
	return out.Placed, nil
}

func recordCandidate(rec *heartbeat.CheckpointRecord) candidate {
	return candidate{
		rec:   rec,
		ref:   uploader.BlossomRef{SHA256: rec.Manifest, Ext: "json", Servers: rec.Servers, Size: rec.ManifestSize},
		what:  fmt.Sprintf("epoch %d seq %d (record %s by %s)", rec.Epoch, rec.Seq, short(rec.EventID), short(rec.Signer)),
		label: rec.EventID,
	}
}

// hintWithoutRecords tries the revocation's state_uri when too few relays
// answered the records query (queryErr): the holder's last word on its
// state, in a revocation whose signer the ingest checked, needs no record
// to be restored (with the records, the hint is tried first anyway), and
// without it a planned move whose successor reads relays under load
// loses the final state (a best-effort restore that fails starts from
// nothing). Its author must still be a known holder of an earlier epoch.
// When it cannot be placed, the try fails with queryErr (and why the hint
// could not be placed), to be retried.
func (r *Restorer) hintWithoutRecords(ctx context.Context, req RestoreRequest, out RestoreOutcome, queryErr error) (RestoreOutcome, error) {
	ref, err := uploader.ParseBlossomURI(req.Hint)
	if err == nil {
		if why := r.hintRefusal(req, ref); why != "" {
			err = errors.New(why)
		}
	}
	if err != nil {
		out.Refused = append(out.Refused, lease.CheckpointRefusal{EventID: "hint", Reason: RefuseBadHint, Detail: err.Error()})
		return out, fmt.Errorf("%w; the revocation's state_uri refused: %v", queryErr, err)
	}
	c := candidate{ref: ref, what: "the revocation's state_uri " + short(ref.SHA256), label: "hint"}
	err = r.fetchAndPlace(ctx, req, c, &out)
	if err == nil {
		out.Result.OK = true
		out.Result.From = fmt.Sprintf("%s, without its record (%v)", c.what, queryErr)
		return out, nil
	}
	if reason := blobRefusal(err); reason != "" {
		out.Refused = append(out.Refused, lease.CheckpointRefusal{EventID: c.label, Reason: reason, Detail: err.Error()})
	}
	return out, fmt.Errorf("%w; %s: %v", queryErr, c.what, err)
}

// hintRefusal says why a revocation's state_uri that no usable record
// names may not be restored ("" when it may): its author (the as hint)
// must be a known holder of an epoch before req's.
func (r *Restorer) hintRefusal(req RestoreRequest, ref uploader.BlossomRef) string {
	for _, a := range ref.Authors {
		for _, h := range req.Holders {
			if h.Holder == a && h.Epoch < req.Epoch {
				return ""
			}
		}
	}
	return "no usable record names its manifest and its author is no known holder of an earlier epoch"
}

// query reads and verifies the workload's checkpoint records.
func (r *Restorer) query(ctx context.Context, req RestoreRequest, out *RestoreOutcome) ([]*heartbeat.CheckpointRecord, error) {
	if len(req.Members) == 0 {
		return nil, errors.New("query checkpoint records: the lease names no members")
	}
	qctx := ctx
	if r.QueryTimeout > 0 {
		var cancel context.CancelFunc
		qctx, cancel = context.WithTimeout(ctx, r.QueryTimeout)
		defer cancel()
	}
	evs, answered := r.Relays.Query(qctx, RecordsFilter(req.ID, req.Epoch, req.Holders, req.Members))
	if answered < r.Quorum {
		return nil, fmt.Errorf("query checkpoint records: %d relays answered, %d needed: %w", answered, r.Quorum, errUnavailable)
	}
	now := r.now()
	seen := map[string]bool{}
	var recs []*heartbeat.CheckpointRecord
	for _, re := range evs {
		ev := re.Event
		if ev == nil || seen[ev.ID] {
			continue
		}
		seen[ev.ID] = true
		got, err := r.Verify.Ingest(ctx, now, ev)
		if err != nil {
			reason := string(heartbeat.ReasonOf(err))
			if reason == "" {
				reason = "rejected"
			}
			out.Refused = append(out.Refused, lease.CheckpointRefusal{EventID: ev.ID, Reason: reason, Detail: err.Error()})
			continue
		}
		if c := got.Checkpoint; c != nil && c.WorkloadID == req.ID {
			recs = append(recs, c)
		}
	}
	return recs, nil
}

// RecordsFilter is the query of workload's checkpoint records by members:
// the d tags of the epochs whose holder is known (the only ones a restore
// for epoch may use), of epoch itself and of the next (read only to say
// why they are refused). A d tag longer than a relay's filter item limit
// (255 bytes, an id of more than about 200 bytes) drops the tag filter:
// then every checkpoint record of the members is read.
func RecordsFilter(workload string, epoch uint64, holders []lease.EpochHolder, members []string) nostr.Filter {
	f := nostr.Filter{Kinds: []int{heartbeat.KindCheckpoint}, Authors: members, Limit: 500}
	seen := map[uint64]bool{}
	var ds []string
	add := func(e uint64) {
		if e >= 1 && e < lease.MaxEpoch && !seen[e] {
			seen[e] = true
			ds = append(ds, heartbeat.CheckpointDTag(workload, e))
		}
	}
	for _, h := range holders {
		add(h.Epoch)
	}
	add(epoch)
	add(epoch + 1)
	for _, d := range ds {
		if len(d) > 255 {
			return f
		}
	}
	f.Tags = nostr.TagMap{"d": ds}
	return f
}

// blobRefusal classifies a fetch error: a refusal reason when a server
// served wrong bytes, "" when the blob was only unavailable.
func blobRefusal(err error) string {
	switch {
	case errors.Is(err, uploader.ErrTruncatedTile):
		return RefuseTruncatedTile
	case errors.Is(err, uploader.ErrHashMismatch):
		return RefuseHashMismatch
	case errors.Is(err, uploader.ErrBadManifest):
		return RefuseBadManifest
	case errors.Is(err, errTooLarge):
		return RefuseTooLarge
	case errors.Is(err, errRecordMismatch):
		return RefuseHashMismatch
	case errors.Is(err, ErrUndecryptable):
		return RefuseUndecryptable
	}
	return ""
}

var (
	errTooLarge       = errors.New("checkpoint over the size limit")
	errRecordMismatch = errors.New("manifest does not match its record")
)

// fetchAndPlace fetches c's manifest and tiles and places the file.
func (r *Restorer) fetchAndPlace(ctx context.Context, req RestoreRequest, c candidate, out *RestoreOutcome) error {
	m, servers, err := r.fetchManifest(ctx, req, c)
	if err != nil {
		return err
	}
	bad := r.badCopies(req.ID)
	id, err := place(ctx, req.Dir, func(w io.Writer) error { return r.writeTiles(ctx, m, servers, bad, w) })
	if err != nil {
		return err
	}
	out.Placed = id
	out.Blobs = append(out.Blobs[:0], c.ref.SHA256)
	for _, t := range m.stored.Tiles {
		out.Blobs = append(out.Blobs, t.SHA256)
	}
	switch rec := c.rec; {
	case rec == nil:
		out.StateURI = c.ref.String()
	case rec.StateURI != "":
		out.StateURI = rec.StateURI
	default:
		out.StateURI = uploader.BlossomURI(rec.Manifest, "json", rec.Servers, rec.Signer, rec.ManifestSize)
	}
	return nil
}

// fetchManifest fetches and checks c's manifest (against its record, and
// the size bound) and returns it with the servers to fetch its tiles from.
func (r *Restorer) fetchManifest(ctx context.Context, req RestoreRequest, c candidate) (manifest, []string, error) {
	servers := mergeServers(c.ref.ServerURLs(), req.Servers)
	if len(servers) == 0 {
		return manifest{}, nil, errors.New("no server to fetch it from")
	}
	mb, err := r.Blobs.Blob(ctx, c.ref.SHA256, -1, 0, servers, r.badCopies(req.ID))
	if err != nil {
		return manifest{}, nil, fmt.Errorf("fetch manifest: %w", err)
	}
	m, err := decodeManifest(mb, req.Key, c.label == "seed")
	if err != nil {
		return manifest{}, nil, fmt.Errorf("manifest %s: %w", short(c.ref.SHA256), err)
	}
	if rec := c.rec; rec != nil && (m.stored.Size != rec.Size || m.stored.SHA256 != rec.SHA256) {
		return manifest{}, nil, fmt.Errorf("manifest %s: tiles of %d bytes sha256 %s, the record says %d bytes %s: %w",
			short(c.ref.SHA256), m.stored.Size, short(m.stored.SHA256), rec.Size, short(rec.SHA256), errRecordMismatch)
	}
	if r.MaxBytes > 0 && m.size > r.MaxBytes {
		return manifest{}, nil, fmt.Errorf("manifest %s: %d bytes, the limit is %d: %w", short(c.ref.SHA256), m.size, r.MaxBytes, errTooLarge)
	}
	return m, servers, nil
}

// ReadURI writes the checkpoint whose manifest the BUD-10 uri names (from
// its xs servers, then servers) to w, every hash verified and every blob
// opened with key (nil: a plaintext checkpoint), without placing it: for
// tools and tests that read a published checkpoint. On an error w may
// hold part of it.
func (r *Restorer) ReadURI(ctx context.Context, workload, uri string, key *Key, servers []string, w io.Writer) error {
	ref, err := uploader.ParseBlossomURI(uri)
	if err != nil {
		return err
	}
	req := RestoreRequest{RestoreCheckpoint: lease.RestoreCheckpoint{ID: workload}, Servers: servers, Key: key}
	m, all, err := r.fetchManifest(ctx, req, candidate{ref: ref, what: "state_uri " + short(ref.SHA256), label: "uri"})
	if err != nil {
		return err
	}
	return r.writeTiles(ctx, m, all, r.badCopies(workload), w)
}

// writeTiles fetches the tiles of m in order, each verified (and opened
// with m's key when sealed), writes the file to w and verifies its hash.
func (r *Restorer) writeTiles(ctx context.Context, m manifest, servers []string, bad uploader.BadCopy, w io.Writer) error {
	whole := sha256.New()
	for i, t := range m.stored.Tiles {
		body, err := r.Blobs.Blob(ctx, t.SHA256, t.Size, t.Size, servers, bad)
		if err != nil {
			return fmt.Errorf("tile %d: %w", i, err)
		}
		if m.key != nil {
			if body, err = m.key.open(sealTile, body); err != nil {
				return fmt.Errorf("tile %d (%s): %w", i, short(t.SHA256), err)
			}
		}
		whole.Write(body)
		if _, err := w.Write(body); err != nil {
			return fmt.Errorf("tile %d: write: %w", i, err)
		}
	}
	if got := hex.EncodeToString(whole.Sum(nil)); got != m.sha256 {
		return fmt.Errorf("file sha256 %s, the manifest says %s: %w", short(got), short(m.sha256), uploader.ErrHashMismatch)
	}
	return nil
}

// badCopies reports each server that served wrong bytes for a blob of
// workload's checkpoint: a WARN, and OnBadCopy.
func (r *Restorer) badCopies(workload string) uploader.BadCopy {
	return func(server, sha string, err error) {
		reason := blobRefusal(err)
		r.logger().Warn("checkpoint blob refused: the server served wrong bytes", "workload", workload, "server", server,
			"blob", sha, "reason", reason, "err", err)
		if r.OnBadCopy != nil {
			r.OnBadCopy(BadCopy{Workload: workload, Server: server, Blob: sha, Reason: reason, Err: err})
		}
	}
}

// mergeServers returns a's then b's servers, each once (as ServerKey).
func mergeServers(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string(nil), a...), b...) {
		k := uploader.ServerKey(s)
		if k != "" && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// place writes the checkpoint into d as FileName, whole or not at all:
// a new temporary file in the directory (opened without following
// links), written by write, synced, owned by d.UID:d.GID with mode 0600,
// then renamed onto FileName if ctx has not ended; the directory is
// synced. Any failure removes the temporary file.
func place(ctx context.Context, d Dir, write func(io.Writer) error) (FileID, error) {
	dfd, err := unix.Open(d.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return FileID{}, &os.PathError{Op: "open", Path: d.Path, Err: err}
	}
	defer unix.Close(dfd)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".restore-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return FileID{}, &os.PathError{Op: "create", Path: d.Path + "/" + tmp, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.Path+"/"+tmp)
	done := false
	defer func() {
		if !done {
			f.Close()
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	if err := write(f); err != nil {
		return FileID{}, err
	}
	if err := f.Sync(); err != nil {
		return FileID{}, err
	}
	if err := unix.Fchown(fd, d.UID, d.GID); err != nil {
		return FileID{}, &os.PathError{Op: "chown", Path: f.Name(), Err: err}
	}
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return FileID{}, &os.PathError{Op: "chmod", Path: f.Name(), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileID{}, &os.PathError{Op: "stat", Path: f.Name(), Err: err}
	}
	if err := context.Cause(ctx); err != nil {
		return FileID{}, fmt.Errorf("not placed: %w", err)
	}
	if err := unix.Renameat(dfd, tmp, dfd, FileName); err != nil {
		return FileID{}, &os.PathError{Op: "rename", Path: f.Name(), Err: err}
	}
	done = true
	f.Close()
	_ = unix.Fsync(dfd)
	return FileID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

// blocking reports whether any refusal is of a record of this lease's
// grant: then the attempt fails (something was published and is refused)
// instead of calling the workload fresh. Records of another grant of the
// same id (left on the relays by an earlier lease) are not.
// refusedFor reports whether any of rs was refused for reason.
func refusedFor(rs []lease.CheckpointRefusal, reason string) bool {
	for _, r := range rs {
		if r.Reason == reason {
			return true
		}
	}
	return false
}

func blocking(rs []lease.CheckpointRefusal) bool {
	for _, r := range rs {
		if r.Reason != lease.RefuseOtherGrant && r.Reason != lease.RefuseOtherWorkload {
			return true
		}
	}
	return false
}

// refusals names refused records for a reason: "wrong_signer (1a2b3c4d),
// later_epoch (...)".
func refusals(rs []lease.CheckpointRefusal) string {
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%s %s: %s", r.Reason, short(r.EventID), r.Detail))
	}
	return strings.Join(parts, "; ")
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
