package agent

import (
	"context"
	"database/sql"

	"provideragent/internal/sqlitedb"
)

func openTestDB(ctx context.Context, path string) (*sql.DB, error) {
	return sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: "NORMAL"})
}
