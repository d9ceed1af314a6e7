// Package uploadertest runs a real Blossom server for tests: khatru's blossom
// handlers on an httptest server, with an in-memory blob store and switches
// that reject chosen blobs, fail transiently, corrupt downloads, slow or hold
// uploads, or take the server down. It counts the uploads it serves at once,
// so tests can check the uploader's concurrency bound. Tests of the uploader
// and of the CLI use it as the far end of real HTTP uploads and downloads.
package uploadertest
