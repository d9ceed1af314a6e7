// Package uploadertest runs a real Blossom server for tests: khatru's blossom
// handlers on an httptest server, with an in-memory blob store and switches
// that reject chosen blobs, fail transiently, corrupt downloads, or take the
// server down. Tests of the uploader and of the CLI use it as the far end of
// real HTTP uploads and downloads.
package uploadertest
