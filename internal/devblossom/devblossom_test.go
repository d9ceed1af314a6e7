package devblossom_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/devblossom"
	"provideragent/internal/devblossom/devblossomtest"
	"provideragent/internal/sqlitedb"
	"provideragent/uploader"
)

// upload stores data as tiles and uploads them to url with key; it returns
// the manifest and the upload report.
func upload(t *testing.T, url, key string, data []byte) (uploader.Manifest, uploader.Report, error) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(t.TempDir(), "a.db"), sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st, err := uploader.NewStore(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := st.AddFile(ctx, "w1", bytes.NewReader(data), 1024)
	if err != nil {
		t.Fatal(err)
	}
	cfg := uploader.DefaultConfig()
	cfg.Servers = []string{url}
	cfg.DisableRetry = true
	up, err := uploader.BuildUploader(cfg, uploader.Deps{Store: st, SecretKey: key})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := up.UploadPending(ctx, uploader.Request{})
	return m, rep, err
}

func restore(m uploader.Manifest, url string) ([]byte, error) {
	var out bytes.Buffer
	err := uploader.Restore(context.Background(), http.DefaultClient, m, []string{url}, &out)
	return out.Bytes(), err
}

// TestUploadRestoreAndRestart: the agent's uploader stores tiles on the
// server, Restore rebuilds the file from it, and with Dir the blobs are
// still served after a restart.
func TestUploadRestoreAndRestart(t *testing.T) {
	dir := t.TempDir()
	s := devblossomtest.Start(t, devblossom.Options{Dir: dir})
	data := make([]byte, 5000)
	_, _ = rand.Read(data)
	m, rep, err := upload(t, s.URL(), nostr.GeneratePrivateKey(), data)
	if err != nil || rep.Outcome != uploader.OutcomeSuccess || rep.Accepted != len(m.Tiles) {
		t.Fatalf("UploadPending = %+v, %v, want every tile accepted", rep, err)
	}
	if st := s.Stats(); st.Blobs != len(m.Tiles) || st.Bytes != int64(len(data)) {
		t.Errorf("Stats = %+v, want %d blobs of %d bytes", st, len(m.Tiles), len(data))
	}
	got, err := restore(m, s.URL())
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Restore = %d bytes, %v, want the file", len(got), err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := devblossomtest.Start(t, devblossom.Options{Dir: dir})
	if st := again.Stats(); st.Blobs != len(m.Tiles) {
		t.Errorf("Stats after a restart = %+v, want the %d blobs of the dir", st, len(m.Tiles))
	}
	if got, err := restore(m, again.URL()); err != nil || !bytes.Equal(got, data) {
		t.Errorf("Restore after a restart = %d bytes, %v, want the file", len(got), err)
	}
}

// TestRefusals: keys not allowed get 403, blobs over the limit 413, a full
// server 507; the tiles are rejected, not lost.
func TestRefusals(t *testing.T) {
	allowed := nostr.GeneratePrivateKey()
	pub, _ := nostr.GetPublicKey(allowed)
	tests := []struct {
		name string
		opts devblossom.Options
		key  string
		want string
	}{
		{"key not allowed", devblossom.Options{Allow: []string{pub}}, nostr.GeneratePrivateKey(), "not allowed"},
		{"blob too large", devblossom.Options{MaxBlobBytes: 100}, allowed, "over the limit"},
		{"server full", devblossom.Options{MaxTotalBytes: 1500}, allowed, "server full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := devblossomtest.Start(t, tt.opts)
			_, rep, err := upload(t, s.URL(), tt.key, bytes.Repeat([]byte("x"), 3000))
			if err != nil || rep.Rejected == 0 {
				t.Fatalf("UploadPending = %+v, %v, want rejected tiles", rep, err)
			}
			found := false
			for _, tr := range rep.Tiles {
				found = found || strings.Contains(tr.Reason, tt.want)
			}
			if !found {
				t.Errorf("rejections = %+v, want a reason containing %q", rep.Tiles, tt.want)
			}
		})
	}
	s := devblossomtest.Start(t, devblossom.Options{Allow: []string{pub}})
	if _, rep, err := upload(t, s.URL(), allowed, []byte("ok")); err != nil || rep.Outcome != uploader.OutcomeSuccess {
		t.Errorf("upload by the allowed key = %+v, %v, want success", rep, err)
	}
	if _, err := devblossom.New(devblossom.Options{Allow: []string{"npub1nope"}}); err == nil {
		t.Errorf("New(Allow npub) = nil error, want a hex key required")
	}
}

// TestOnlyBlossomRoutes: no relay, no mirror, no unauthenticated delete.
func TestOnlyBlossomRoutes(t *testing.T) {
	s := devblossomtest.Start(t, devblossom.Options{})
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/", http.StatusOK},
		{http.MethodPut, "/mirror", http.StatusNotFound},
		{http.MethodGet, "/media", http.StatusNotFound},
		{http.MethodGet, "/nope", http.StatusNotFound},
		{http.MethodGet, "/" + strings.Repeat("a", 64), http.StatusNotFound},
		{http.MethodDelete, "/" + strings.Repeat("a", 64), http.StatusUnauthorized},
		{http.MethodPut, "/upload", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest(tt.method, s.URL()+tt.path, strings.NewReader("x"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, resp.StatusCode, tt.want)
		}
	}
}

// TestQuotaHoldsUnderParallelUploads: uploads that all pass the quota
// check before any of them is stored cannot together exceed the limit,
// and what a refused or broken upload reserved is given back.
func TestQuotaHoldsUnderParallelUploads(t *testing.T) {
	s := devblossomtest.Start(t, devblossom.Options{MaxTotalBytes: 1500})
	key := nostr.GeneratePrivateKey()
	release := make(chan struct{})
	// slowBody sends the 50 bytes the server reads before its quota check,
	// then the rest (or an error: a client gone) once release is closed.
	slowBody := func(b byte, broken bool) io.Reader {
		body := bytes.Repeat([]byte{b}, 1000)
		pr, pw := io.Pipe()
		go func() {
			pw.Write(body[:50])
			<-release
			if broken {
				pw.CloseWithError(errors.New("client gone"))
				return
			}
			pw.Write(body[50:])
			pw.Close()
		}()
		return pr
	}
	close(release)
	if c := putBlob(t, s.URL(), key, slowBody('0', true), 1000); c == http.StatusOK {
		t.Fatalf("a broken upload = %d, want a failure", c)
	}
	release = make(chan struct{})
	const parallel = 8
	codes := make(chan int, parallel)
	var wg sync.WaitGroup
	for i := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- putBlob(t, s.URL(), key, slowBody(byte('a'+i), false), 1000)
		}()
	}
	time.Sleep(300 * time.Millisecond) // every request is past its quota check
	close(release)
	wg.Wait()
	close(codes)
	ok := 0
	for c := range codes {
		if c == http.StatusOK {
			ok++
		}
	}
	if st := s.Stats(); ok != 1 || st.Bytes > 1500 {
		t.Fatalf("%d parallel 1000-byte uploads under a 1500-byte limit after a broken one: %d accepted, %+v stored, want 1 accepted", parallel, ok, st)
	}
	if c := putBlob(t, s.URL(), key, bytes.NewReader(bytes.Repeat([]byte("z"), 500)), 500); c != http.StatusOK {
		t.Errorf("500 bytes into the 500 left = %d, want 200 (the refused uploads reserved nothing)", c)
	}
}

// putBlob PUTs size bytes of body to url/upload with a BUD-02 upload
// authorization signed by key and returns the status code (0 when the
// request itself failed).
func putBlob(t *testing.T, url, key string, body io.Reader, size int) int {
	t.Helper()
	auth := nostr.Event{Kind: 24242, CreatedAt: nostr.Now(), Content: "upload", Tags: nostr.Tags{
		{"t", "upload"}, {"expiration", strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)}}}
	if err := auth.Sign(key); err != nil {
		t.Error(err)
		return 0
	}
	req, _ := http.NewRequest(http.MethodPut, url+"/upload", body)
	req.ContentLength = int64(size)
	req.Header.Set("Authorization", "Nostr "+base64.StdEncoding.EncodeToString([]byte(auth.String())))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
