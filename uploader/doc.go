// Package uploader stores checkpoint tiles in SQLite and uploads them to
// Blossom servers (BUD-01/02), so a workload can be restored elsewhere from a
// manifest of tile hashes.
//
// Split/AddFile cut a file into fixed-size, sha256-addressed tiles; Store keeps
// them with their status and a per-tile upload_attempts counter; the Blossom
// uploader PUTs pending tiles with bounded concurrency; RetryUploader wraps
// any Uploader with a bounded in-call retry loop and a per-tile give-up
// budget. BuildUploader composes them from Config, and Restore downloads,
// verifies and reassembles a file from its Manifest (RestoreFile: into a
// file, whole or not at all; FetchManifest gets the manifest blob itself;
// FetchBlob gets one blob and says which servers served wrong bytes).
// Every server that acknowledged a blob is recorded (Store.Placed counts
// them for a checkpoint), Deleter deletes a superseded blob (BUD-12), and
// uri.go reads and writes BUD-10 blossom: URIs.
package uploader
