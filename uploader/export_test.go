package uploader

// Migrations is migrations for the external tests (uploader_test), which
// build a database at an older schema version.
var Migrations = migrations

// Truncate is truncate, for TestTruncate.
var Truncate = truncate
